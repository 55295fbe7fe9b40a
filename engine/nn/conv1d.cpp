#include "engine/nn/conv1d.h"

#include <cmath>

#include "engine/nn/init.h"

namespace tandem::nn {

Conv1d::Conv1d(const Conv1dOptions& o) {
  TANDEM_CHECK(o.in_channels > 0 && o.out_channels > 0 && o.groups > 0 && o.in_channels % o.groups == 0 &&
                   o.out_channels % o.groups == 0 && o.kernel_size > 0,
               ErrorCode::kInvalidArgument,
               "Conv1d: in_channels {} and out_channels {} must be positive multiples of groups {}, kernel_size {} "
               "positive",
               o.in_channels, o.out_channels, o.groups, o.kernel_size);
  params_ = {o.stride, o.padding, o.dilation, o.groups};
  Tensor w = Tensor::empty({o.out_channels, o.in_channels / o.groups, o.kernel_size});
  // kaiming_uniform_(a = sqrt(5)) and the bias's rule both come to this bound.
  const float bound = 1.0f / std::sqrt(static_cast<float>(init::fan_in(w.shape())));
  init::uniform(w, bound);
  weight_ = register_parameter("weight", w);
  if (o.bias) {
    Tensor b = Tensor::empty({o.out_channels});
    init::uniform(b, bound);
    bias_ = register_parameter("bias", b);
  }
}

Variable Conv1d::forward(ExecutionContext& ctx, const Variable& x) {
  return autograd::conv1d(ctx, x, weight_, bias_, params_);
}

}  // namespace tandem::nn
