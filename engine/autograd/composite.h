// Ops on the tape composed of the ops of ops.h, with PyTorch's names and semantics: they run on
// every device those ops run on, and their backward is the chain of their parts' (but for
// binary_cross_entropy_with_logits, whose gradient is written out: sigmoid(x) - y, also at x = 0).
#pragma once

#include <optional>
#include <span>
#include <string_view>

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

// The reduction argument of PyTorch's losses. kBatchMean (the sum over the batch size, input's
// first dimension) is kl_div's alone, as in PyTorch.
enum class LossReduction { kMean, kSum, kNone, kBatchMean };

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

// F.kl_div(input, target): input holds log-probabilities; target probabilities (or, with
// log_target, log-probabilities). Per element target (log target - input), 0 where target is 0
// (PyTorch's xlogy), or exp(target) (target - input) with log_target. kMean averages every element
// as PyTorch's 'mean' does; kBatchMean, the KL divergence's true mean, divides the sum by the batch size.
// Where the target is 0 and takes a gradient, that gradient is log(FLT_MIN) - input (PyTorch's xlogy
// gives NaN there); the loss's value and the input's gradient are PyTorch's.
Variable kl_div(ExecutionContext& ctx, const Variable& input, const Variable& target,
                LossReduction reduction = LossReduction::kMean, bool log_target = false);

// ---- Layers (ops_composite_layers.cpp). ----

// torch.index_select: the slices of x at `index` (i64, 1-D or a single value) along dim, in index's
// order, repeats allowed; the gradient of a repeated slice is the sum of its copies' (embedding's
// deterministic backward: the same bits every run). f32 x. An index out of range is an error on the
// CPU and NaN on CUDA (embedding's rule: the device cannot report it).
Variable index_select(ExecutionContext& ctx, const Variable& x, int dim, const Tensor& index);

// F.rms_norm over the last normalized_dims dimensions: x / sqrt(mean(x^2) + eps), times weight (of
// those dimensions' shape) when defined. eps defaults to PyTorch's, the f32 machine epsilon.
Variable rms_norm(ExecutionContext& ctx, const Variable& x, int normalized_dims, const Variable& weight = {},
                  std::optional<float> eps = std::nullopt);

// F.group_norm: x (N, C, ...) normalised over each group of C / groups channels (and every element
// after the channel dimension) with the biased variance, then weight and bias (C, may be undefined)
// per channel. It runs as layer_norm of the (N, groups, rest) view.
Variable group_norm(ExecutionContext& ctx, const Variable& x, int64_t groups, const Variable& weight = {},
                    const Variable& bias = {}, float eps = 1e-5f);

// F.conv1d: x (N, C, L) or (C, L), w (K, C / groups, R), b (K) or undefined -> (N, K, L') or (K, L'),
// computed by conv2d on (N, C, 1, L).
struct Conv1dParams {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};
Variable conv1d(ExecutionContext& ctx, const Variable& x, const Variable& w, const Variable& b,
                const Conv1dParams& params = {});

// F.pad: pads = {last dim's left, its right, the dim before's left, ...} (at most two per dimension).
// kConstant fills with value, and a negative pad removes elements; kReflect mirrors without the edge
// (a pad below the dimension's size), kReplicate repeats the edge, kCircular wraps around (a pad up
// to the size); those three take no negative pad. Unlike PyTorch, every mode takes any rank.
enum class PadMode { kConstant, kReflect, kReplicate, kCircular };
Variable pad(ExecutionContext& ctx, const Variable& x, std::span<const int64_t> pads,
             PadMode mode = PadMode::kConstant, float value = 0.0f);

// ---- Selection (ops_select.cpp), over backend::compare, where, cast and gather. ----

// torch.where(cond, a, b): a where cond (u8) is not 0, else b, broadcast; each gradient flows to
// the branch that was taken (summed back to its input's shape), and nothing of the other branch
// (an inf or NaN there) reaches the result.
Variable where(ExecutionContext& ctx, const Tensor& cond, const Variable& a, const Variable& b);

// torch.gather(x, dim, index): index (i64, x's rank, no larger than x but along dim) picks along
// dim; the result has index's shape. The gradient sums what each element gave, in index order (the
// same bits every run and on every backend), at a cost of x.numel() * index.size(dim). On the CPU
// every index is checked; on CUDA one out of range gives NaN and no gradient.
Variable gather(ExecutionContext& ctx, const Variable& x, int dim, const Tensor& index);

// torch.topk(x, k, dim, largest, sorted=True): the k largest (or smallest) values along dim and
// their i64 indices, best first; NaN counts as the largest, ties go to the lower index (the same
// picks on every backend). The values are gather(x, dim, indices), so their gradient flows back to
// the picked elements.
struct TopK {
  Variable values;
  Tensor indices;
};
TopK topk(ExecutionContext& ctx, const Variable& x, int64_t k, int dim = -1, bool largest = true);

// torch.clamp: below min becomes min, above max becomes max (one of them may be absent; min > max
// gives max everywhere, as PyTorch). The gradient is 1 inside [min, max], 0 outside and at a NaN,
// which stays NaN.
Variable clamp(ExecutionContext& ctx, const Variable& x, std::optional<float> min, std::optional<float> max);

// torch.cumsum along dim, by log2(n) shifted adds (f32 additions, no matmul, so precision: bf16
// does not round it).
Variable cumsum(ExecutionContext& ctx, const Variable& x, int dim);

// F.one_hot: i64 (ids..., num_classes), 1 at each id. num_classes -1 takes the largest id + 1. The
// ids are read on the host to check them (as PyTorch's one_hot does): each in [0, num_classes).
Tensor one_hot(ExecutionContext& ctx, const Tensor& ids, int64_t num_classes = -1);

// torch.argmax: the i64 index of the largest value along dim (the first of ties; a NaN counts as
// the largest, as PyTorch's), or of the flattened tensor without a dim. No gradient.
Tensor argmax(ExecutionContext& ctx, const Variable& x, std::optional<int> dim = std::nullopt, bool keepdim = false);

// F.nll_loss: input (N, C) log-probabilities, target (N) i64; a row's loss is -input[i, target[i]],
// 0 where target is ignore_index. kMean divides by the number of rows not ignored (nan if none, as
// PyTorch). On the CPU every other target is checked to be in [0, C); on CUDA that check would
// cost a host synchronisation per step and is not made (an out-of-range target gives loss 0).
Variable nll_loss(ExecutionContext& ctx, const Variable& input, const Tensor& target, int64_t ignore_index = -100,
                  LossReduction reduction = LossReduction::kMean);

// ---- torch.einsum (einsum.cpp). ----

// Operands named by letters ("bij,bjk->bik", "bhqd,bhkd->bhqk", "ij->ji", "i,i->", "ij,j"; without
// "->" the output is the letters that appear once, in alphabetical order, as PyTorch's). Letters in
// one operand only and not in the output are summed first; then operands are contracted left to
// right, each pair as one batched matmul (batch letters, kept letters, summed letters) with the
// permutes and reshapes around it. A letter's sizes must agree (no broadcasting of size 1), and a
// letter repeated in one operand (a diagonal, "ii->i") and "..." are Unimplemented.
Variable einsum(ExecutionContext& ctx, std::string_view equation, std::span<const Variable> operands);

}  // namespace tandem::autograd
