#include "engine/nn/linear_head.h"

#include "engine/autograd/ops.h"

namespace tandem::nn {

autograd::Variable model_cross_entropy_loss(ExecutionContext& ctx, Module& model, const autograd::Variable& input,
                                            const Tensor& labels, float label_smoothing, int64_t divisor) {
  if (auto* head = dynamic_cast<LinearHead*>(&model)) {
    autograd::LinearCrossEntropyOptions o;
    o.label_smoothing = label_smoothing;
    o.divisor = divisor;
    return autograd::linear_cross_entropy_loss(ctx, head->hidden_states(ctx, input), head->head_weight(), labels, o);
  }
  return autograd::cross_entropy_loss(ctx, model.forward(ctx, input), labels, label_smoothing, divisor);
}

}  // namespace tandem::nn
