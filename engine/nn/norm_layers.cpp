#include "engine/nn/norm_layers.h"

#include "engine/autograd/composite.h"
#include "engine/nn/init.h"

namespace tandem::nn {

RMSNorm::RMSNorm(int64_t normalized_shape, std::optional<float> eps, bool elementwise_affine)
    : normalized_shape_(normalized_shape), eps_(eps) {
  TANDEM_CHECK(normalized_shape > 0 && eps.value_or(0.0f) >= 0.0f, ErrorCode::kInvalidArgument,
               "RMSNorm: normalized_shape {} must be positive and eps {} non-negative", normalized_shape,
               eps.value_or(0.0f));
  if (!elementwise_affine) return;
  Tensor w = Tensor::empty({normalized_shape});
  init::constant(w, 1.0f);
  weight_ = register_parameter("weight", w);
}

Variable RMSNorm::forward(ExecutionContext& ctx, const Variable& x) {
  const Shape s = x.shape();
  TANDEM_CHECK(s.rank() >= 1 && s[s.rank() - 1] == normalized_shape_, ErrorCode::kInvalidArgument,
               "RMSNorm: input {} must end in normalized_shape {}", s.str(), normalized_shape_);
  return autograd::rms_norm(ctx, x, 1, weight_, eps_);
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, float eps, bool affine)
    : groups_(num_groups), channels_(num_channels), eps_(eps) {
  TANDEM_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0 && eps > 0.0f,
               ErrorCode::kInvalidArgument,
               "GroupNorm: num_channels {} must be a positive multiple of num_groups {}, and eps {} positive",
               num_channels, num_groups, eps);
  if (!affine) return;
  Tensor w = Tensor::empty({num_channels});
  init::constant(w, 1.0f);
  weight_ = register_parameter("weight", w);
  bias_ = register_parameter("bias", Tensor::zeros({num_channels}));
}

Variable GroupNorm::forward(ExecutionContext& ctx, const Variable& x) {
  TANDEM_CHECK(x.shape().rank() >= 2 && x.shape()[1] == channels_, ErrorCode::kInvalidArgument,
               "GroupNorm: input {} must be (N, C, ...) with C = num_channels {}", x.shape().str(), channels_);
  return autograd::group_norm(ctx, x, groups_, weight_, bias_, eps_);
}

}  // namespace tandem::nn
