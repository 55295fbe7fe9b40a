// Linear: PyTorch's default initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
#include <cmath>

#include "engine/nn/init.h"
#include "engine/nn/layers.h"

namespace tandem::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias) {
  TANDEM_CHECK(in_features > 0 && out_features > 0, ErrorCode::kInvalidArgument,
               "Linear: in_features {} and out_features {} must be positive", in_features, out_features);
  float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
  Tensor w = Tensor::empty({out_features, in_features});
  init::uniform(w, bound);
  weight_ = register_parameter("weight", w);
  if (bias) {
    Tensor b = Tensor::empty({out_features});
    init::uniform(b, bound);
    bias_ = register_parameter("bias", b);
  }
}

Variable Linear::forward(ExecutionContext& ctx, const Variable& x) {
  return autograd::linear(ctx, x, weight_, bias_, bf16_output_);
}

}  // namespace tandem::nn
