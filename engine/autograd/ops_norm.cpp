// Differentiable batch normalisation and dropout.
#include "engine/autograd/ops.h"
#include "engine/autograd/trace.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

std::vector<Tensor> batchnorm_grads(backend::BatchNormGrads g, bool need_dx) {
  return {need_dx ? std::move(g.dx) : Tensor(), std::move(g.dgamma), std::move(g.dbeta)};
}

}  // namespace

Variable batchnorm_training(ExecutionContext& ctx, const Variable& x, const Variable& gamma, const Variable& beta,
                            Tensor& running_mean, Tensor& running_var, const BatchNormParams& params) {
  backend::BatchNormForward f =
      backend::batchnorm_forward_training(ctx, params, x.value(), gamma.value(), beta.value(), running_mean,
                                          running_var);
  Tensor xv = x.value(), gv = gamma.value(), y = f.y;
  backend::BatchNormSaved saved = std::move(f.saved);
  bool need_dx = x.requires_grad();
  return make_op("batchnorm", std::move(f.y), {x, gamma, beta},
                 [&ctx, params, xv, gv, y, saved, need_dx](const Tensor& dy) {
                   return batchnorm_grads(backend::batchnorm_backward(ctx, params, xv, y, dy, gv, saved), need_dx);
                 });
}

Variable batchnorm_add_relu_training(ExecutionContext& ctx, const Variable& x, const Variable& gamma,
                                     const Variable& beta, const Variable& shortcut, Tensor& running_mean,
                                     Tensor& running_var, const BatchNormParams& params) {
  BatchNormParams plain = params;
  plain.fuse_relu = false;
  backend::BatchNormForward f = backend::batchnorm_add_relu_forward_training(
      ctx, plain, x.value(), gamma.value(), beta.value(), shortcut.value(), running_mean, running_var);
  Tensor xv = x.value(), gv = gamma.value(), y = f.y;
  backend::BatchNormSaved saved = std::move(f.saved);
  bool need_dx = x.requires_grad();
  return make_op("batchnorm_add_relu", std::move(f.y), {x, gamma, beta, shortcut},
                 [&ctx, plain, xv, gv, y, saved, need_dx](const Tensor& dy) {
                   // The sum's gradient g goes to the shortcut as it is and through batch norm to x.
                   Tensor g = backend::relu_backward(ctx, y, dy);
                   std::vector<Tensor> grads =
                       batchnorm_grads(backend::batchnorm_backward(ctx, plain, xv, y, g, gv, saved), need_dx);
                   grads.push_back(std::move(g));
                   return grads;
                 });
}

Variable batchnorm_inference(ExecutionContext& ctx, const Variable& x, const Variable& gamma,
                             const Variable& beta, const Tensor& running_mean, const Tensor& running_var,
                             const BatchNormParams& params) {
  Tensor y = backend::batchnorm_forward_inference(ctx, params, x.value(), gamma.value(), beta.value(), running_mean,
                                                  running_var);
  if (tracing()) {
    trace_attributes("batchnorm_inference", {{"eps", double{params.eps}},
                                             {"fuse_relu", int64_t{params.fuse_relu}},
                                             {"running_mean", running_mean},
                                             {"running_var", running_var}});
  }
  // Eval mode is for evaluation: a forward without NoGradGuard is fine, but a gradient through
  // frozen statistics is not provided yet, so backward says so instead of computing a wrong one.
  return make_op("batchnorm_inference", std::move(y), {x, gamma, beta}, [](const Tensor&) -> std::vector<Tensor> {
    throw_error(ErrorCode::kUnimplemented,
                "backward through batchnorm in eval mode (frozen statistics) is not supported: train the "
                "BatchNorm layers (module.train()) or keep them out of the loss's graph");
  });
}

Variable dropout(ExecutionContext& ctx, const Variable& x, float p) {
  if (p == 0.0f) return x;
  backend::DropoutForward f = backend::dropout_forward(ctx, x.value(), p);
  Tensor mask = f.mask;
  return make_op("dropout", std::move(f.y), {x}, [&ctx, mask, p](const Tensor& dy) {
    return std::vector<Tensor>{backend::dropout_backward(ctx, dy, mask, p)};
  });
}

}  // namespace tandem::autograd
