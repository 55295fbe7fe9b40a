// Conv2d: torchvision's initialisation (Kaiming normal, fan_out) and PyTorch's bias bound.
#include <cmath>

#include "engine/nn/init.h"
#include "engine/nn/layers.h"

namespace tandem::nn {

Conv2d::Conv2d(const Conv2dOptions& o) {
  TANDEM_CHECK(o.in_channels > 0 && o.out_channels > 0 && o.groups > 0 && o.in_channels % o.groups == 0 &&
                   o.out_channels % o.groups == 0,
               ErrorCode::kInvalidArgument,
               "Conv2d: in_channels {} and out_channels {} must be positive multiples of groups {}", o.in_channels,
               o.out_channels, o.groups);
  params_.stride = {o.stride, o.stride};
  params_.padding = {o.padding, o.padding};
  params_.dilation = {o.dilation, o.dilation};
  params_.groups = o.groups;
  Tensor w = Tensor::empty({o.out_channels, o.in_channels / o.groups, o.kernel_size, o.kernel_size});
  init::kaiming_normal_fan_out(w);
  weight_ = register_parameter("weight", w);
  if (o.bias) {
    Tensor b = Tensor::empty({o.out_channels});
    init::uniform(b, 1.0f / std::sqrt(static_cast<float>(init::fan_in(w.shape()))));
    bias_ = register_parameter("bias", b);
  }
}

Variable Conv2d::forward(ExecutionContext& ctx, const Variable& x) {
  return autograd::conv2d(ctx, x, weight_, bias_, params_, bf16_output_ && is_training());
}

}  // namespace tandem::nn
