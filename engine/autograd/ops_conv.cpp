// Differentiable convolution and pooling.
#include "engine/autograd/ops.h"
#include "engine/autograd/trace.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

void trace_pool(const char* op, const Pool2dParams& params) {
  if (!tracing()) return;
  trace_attributes(op, {{"kernel", std::vector<int64_t>(params.kernel.begin(), params.kernel.end())},
                        {"stride", std::vector<int64_t>(params.stride.begin(), params.stride.end())},
                        {"padding", std::vector<int64_t>(params.padding.begin(), params.padding.end())},
                        {"count_include_pad", int64_t{params.count_include_pad}}});
}

}  // namespace

Variable conv2d(ExecutionContext& ctx, const Variable& x, const Variable& w, const Variable& b,
                const Conv2dParams& params, bool bf16_output) {
  Tensor bias = b.defined() ? b.value() : Tensor();
  // Under bf16 autocast (where the device takes bf16 operands) x and dy are rounded once, for the
  // forward and both backwards; x's bf16 copy is what the weight gradient keeps.
  Tensor xv = backend::bf16_operand(ctx, x.value()), wv = w.value();
  Tensor y = backend::conv2d_forward(ctx, params, xv, wv, bias, bf16_output);
  std::vector<Variable> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  bool need_dx = x.requires_grad(), with_bias = b.defined();
  // After x's gradient (or its undefined place when it went into a fork's sum), w's and b's.
  auto weight_grads = [&ctx, params, xv, wv, with_bias](const Tensor& dy, std::vector<Tensor> grads) {
    backend::ConvWeightGrads g = backend::conv2d_backward_weights(ctx, params, xv, dy, wv.shape(), with_bias);
    grads.push_back(std::move(g.dw));
    if (with_bias) grads.push_back(std::move(g.db));
    return grads;
  };
  auto backward = [&ctx, params, xv, wv, need_dx, weight_grads](const Tensor& dy_f32) {
    const Tensor dy = backend::bf16_operand(ctx, dy_f32);
    std::vector<Tensor> grads;
    grads.push_back(need_dx ? backend::conv2d_backward_data(ctx, params, dy, wv, xv.shape()) : Tensor());
    return weight_grads(dy, std::move(grads));
  };
  auto backward_adding = [&ctx, params, wv, weight_grads](const Tensor& dy_f32, Tensor& sum) {
    const Tensor dy = backend::bf16_operand(ctx, dy_f32);
    backend::conv2d_backward_data_add(ctx, params, dy, wv, sum);
    return weight_grads(dy, std::vector<Tensor>(1));
  };
  if (tracing()) {
    trace_attributes("conv2d", {{"stride", std::vector<int64_t>(params.stride.begin(), params.stride.end())},
                                {"padding", std::vector<int64_t>(params.padding.begin(), params.padding.end())},
                                {"dilation", std::vector<int64_t>(params.dilation.begin(), params.dilation.end())},
                                {"groups", params.groups}});
  }
  return make_op("conv2d", std::move(y), std::move(inputs), backward, backward_adding);
}

Variable max_pool2d(ExecutionContext& ctx, const Variable& x, const Pool2dParams& params) {
  backend::MaxPoolForward f = backend::max_pool2d_forward(ctx, params, x.value());
  trace_pool("max_pool2d", params);
  Tensor xv = x.value(), workspace = f.workspace;
  return make_op("max_pool2d", std::move(f.y), {x}, [&ctx, params, xv, workspace](const Tensor& dy) {
    return std::vector<Tensor>{backend::max_pool2d_backward(ctx, params, xv, dy, workspace)};
  });
}

Variable avg_pool2d(ExecutionContext& ctx, const Variable& x, const Pool2dParams& params) {
  Tensor y = backend::avg_pool2d_forward(ctx, params, x.value());
  trace_pool("avg_pool2d", params);
  Shape x_shape = x.shape();
  return make_op("avg_pool2d", std::move(y), {x}, [&ctx, params, x_shape](const Tensor& dy) {
    return std::vector<Tensor>{backend::avg_pool2d_backward(ctx, params, dy, x_shape)};
  });
}

Variable global_avg_pool(ExecutionContext& ctx, const Variable& x) {
  Tensor y = backend::global_avg_pool_forward(ctx, x.value());
  Shape x_shape = x.shape();
  return make_op("global_avg_pool", std::move(y), {x}, [&ctx, x_shape](const Tensor& dy) {
    return std::vector<Tensor>{backend::global_avg_pool_backward(ctx, dy, x_shape)};
  });
}

}  // namespace tandem::autograd
