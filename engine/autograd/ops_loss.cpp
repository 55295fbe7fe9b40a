// Differentiable softmax cross-entropy and the loss contract of DESIGN.md.
#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {

Variable softmax_cross_entropy(ExecutionContext& ctx, const Variable& logits, const Tensor& labels,
                               float label_smoothing, int64_t ignore_index) {
  const Shape s = logits.shape();
  if (s.rank() != 2 && s.rank() >= 1) {
    // (N..., K) as (rows, K) rows, the losses back in (N...).
    const int64_t k = s[s.rank() - 1], rows = k > 0 ? s.numel() / k : 0;
    Variable flat = reshape(ctx, logits, Shape{rows, k});
    Variable losses = softmax_cross_entropy(ctx, flat, labels.reshape(Shape{rows}), label_smoothing, ignore_index);
    return reshape(ctx, losses, Shape(std::span<const int64_t>(s.dims().begin(), s.dims().end() - 1)));
  }
  backend::SoftmaxCrossEntropyForward f =
      backend::softmax_cross_entropy_forward(ctx, logits.value(), labels, label_smoothing, ignore_index);
  Tensor probs = f.probs;
  return make_op("softmax_cross_entropy", std::move(f.loss), {logits},
                 [&ctx, probs, labels, label_smoothing, ignore_index](const Tensor& dloss) {
                   return std::vector<Tensor>{backend::softmax_cross_entropy_backward(ctx, probs, labels, label_smoothing,
                                                                                      dloss, ignore_index)};
                 });
}

Variable cross_entropy_loss(ExecutionContext& ctx, const Variable& logits, const Tensor& labels,
                            float label_smoothing, int64_t divisor) {
  TANDEM_CHECK(divisor > 0, ErrorCode::kInvalidArgument,
               "cross_entropy_loss: divisor (the global batch size) must be positive, got {}", divisor);
  Variable per_example = softmax_cross_entropy(ctx, logits, labels, label_smoothing);
  return scale(ctx, sum(ctx, per_example), 1.0f / static_cast<float>(divisor));
}

}  // namespace tandem::autograd
