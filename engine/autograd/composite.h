// Ops on the tape composed of the ops of ops.h, with PyTorch's names and semantics: they run on
// every device those ops run on, and their backward is the chain of their parts' (but for
// binary_cross_entropy_with_logits, whose gradient is written out: sigmoid(x) - y, also at x = 0).
#pragma once

#include <span>

#include "engine/autograd/ops.h"

namespace tandem::autograd {

// torch.stack: tensors of one shape joined along a new dimension dim, in [-(rank + 1), rank].
Variable stack(ExecutionContext& ctx, std::span<const Variable> xs, int dim = 0);

// torch.var and torch.std over dims (every dimension when empty): the sum of squared deviations
// from the mean divided by N - correction (1: Bessel's, PyTorch's default; 0: the population's).
// N - correction <= 0 gives nan or inf, as PyTorch's.
Variable var(ExecutionContext& ctx, const Variable& x, std::span<const int> dims = {}, int64_t correction = 1,
             bool keepdim = false);
Variable std(ExecutionContext& ctx, const Variable& x, std::span<const int> dims = {}, int64_t correction = 1,
             bool keepdim = false);

// torch.tril and torch.triu on the last two dimensions: elements above (tril) or below (triu) the
// diagonal offset by `diagonal` become 0, and take no gradient.
Variable tril(ExecutionContext& ctx, const Variable& x, int64_t diagonal = 0);
Variable triu(ExecutionContext& ctx, const Variable& x, int64_t diagonal = 0);

// The reduction argument of PyTorch's losses.
enum class LossReduction { kMean, kSum, kNone };

// F.mse_loss and F.l1_loss of input and a target of its shape (gradients flow to both).
Variable mse_loss(ExecutionContext& ctx, const Variable& input, const Variable& target,
                  LossReduction reduction = LossReduction::kMean);
Variable l1_loss(ExecutionContext& ctx, const Variable& input, const Variable& target,
                 LossReduction reduction = LossReduction::kMean);
// F.smooth_l1_loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta 0: l1_loss), and
// F.huber_loss: delta times smooth_l1_loss with beta = delta; d = input - target. beta >= 0, delta > 0.
Variable smooth_l1_loss(ExecutionContext& ctx, const Variable& input, const Variable& target,
                        LossReduction reduction = LossReduction::kMean, float beta = 1.0f);
Variable huber_loss(ExecutionContext& ctx, const Variable& input, const Variable& target,
                    LossReduction reduction = LossReduction::kMean, float delta = 1.0f);
// F.binary_cross_entropy_with_logits: max(x, 0) - x y + log(1 + exp(-|x|)) per element, for
// targets y in [0, 1] of x's shape; dx = sigmoid(x) - y, dy = -x.
Variable binary_cross_entropy_with_logits(ExecutionContext& ctx, const Variable& logits, const Variable& target,
                                          LossReduction reduction = LossReduction::kMean);

}  // namespace tandem::autograd
