// BatchNorm2d: per-replica batch statistics in training (the global batch's once a replica
// reducer is set), running statistics in eval, with PyTorch's buffers (running_mean,
// running_var, num_batches_tracked).
#include "engine/nn/init.h"
#include "engine/nn/layers.h"

namespace tandem::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, float eps, float momentum, bool fuse_relu) {
  TANDEM_CHECK(num_features > 0, ErrorCode::kInvalidArgument, "BatchNorm2d: num_features must be positive, got {}",
               num_features);
  params_.eps = eps;
  params_.momentum = momentum;
  params_.fuse_relu = fuse_relu;
  Tensor gamma = Tensor::empty({num_features});
  Tensor beta = Tensor::empty({num_features});
  init::constant(gamma, 1.0f);
  init::constant(beta, 0.0f);
  weight_ = register_parameter("weight", gamma);
  bias_ = register_parameter("bias", beta);
  Tensor mean = Tensor::zeros({num_features});
  Tensor var = Tensor::empty({num_features});
  init::constant(var, 1.0f);
  running_mean_ = &register_buffer("running_mean", mean);
  running_var_ = &register_buffer("running_var", var);
  num_batches_tracked_ = &register_buffer("num_batches_tracked", Tensor::zeros({}, DType::kI64));
}

void BatchNorm2d::count_training_batch() {
  TANDEM_CHECK(num_batches_tracked_->device().is_cpu(), ErrorCode::kInternal,
               "BatchNorm2d: num_batches_tracked is on {}; Module::to keeps integer buffers on the host",
               num_batches_tracked_->device().str());
  ++num_batches_tracked_->data<int64_t>()[0];
}

Variable BatchNorm2d::forward(ExecutionContext& ctx, const Variable& x) {
  if (!is_training()) {
    Variable y = autograd::batchnorm_inference(ctx, x, weight_, bias_, *running_mean_, *running_var_, params_);
    return params_.fuse_relu ? autograd::relu(ctx, y) : y;
  }
  count_training_batch();
  if (synchronized()) {
    return autograd::sync_batchnorm_training(ctx, x, weight_, bias_, *running_mean_, *running_var_, params_,
                                             *reducer_);
  }
  return autograd::batchnorm_training(ctx, x, weight_, bias_, *running_mean_, *running_var_, params_);
}

Variable BatchNorm2d::forward_add_relu(ExecutionContext& ctx, const Variable& x, const Variable& shortcut) {
  TANDEM_CHECK(!params_.fuse_relu, ErrorCode::kInvalidArgument,
               "BatchNorm2d::forward_add_relu: this layer was made with fuse_relu, so its output is already "
               "clipped before the sum; make it without fuse_relu");
  if (!is_training() || synchronized()) return autograd::add_relu(ctx, forward(ctx, x), shortcut);
  count_training_batch();
  return autograd::batchnorm_add_relu_training(ctx, x, weight_, bias_, shortcut, *running_mean_, *running_var_,
                                               params_);
}

}  // namespace tandem::nn
