// The fused classifier (llm.c's, Liger's FusedLinearCrossEntropy): a language model's last linear
// layer and its softmax cross-entropy, chunked over rows so the (rows, V) logits never exist whole.
// The loss is the root of a training step, so its gradient is computed in the forward, chunk by
// chunk, while each chunk's logits are at hand; backward only scales it by the incoming gradient.
#include <algorithm>
#include <span>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

// 2^25 logits: 128 MiB of f32 per chunk (667 rows of GPT-2's 50,257 classes), against 1.5 GiB
// for the whole (8 x 1024, 50,257) at once, and as many again for its probabilities.
constexpr int64_t kDefaultChunkElements = int64_t{1} << 25;

// Rows [begin, begin + count) of a contiguous tensor, as a view of its memory (t outlives it).
Tensor row_window(const Tensor& t, int64_t begin, int64_t count) {
  std::vector<int64_t> dims(t.shape().dims().begin(), t.shape().dims().end());
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(std::max<int64_t>(dims[0], 1));
  dims[0] = count;
  return Tensor::borrow(static_cast<char*>(t.raw_data()) + static_cast<size_t>(begin) * row_bytes,
                        Shape(std::span<const int64_t>(dims)), t.dtype(), t.device());
}

struct Problem {
  int64_t rows, features, classes;
};

Problem check_problem(const Variable& x, const Variable& w, const Tensor& labels, const LinearCrossEntropyOptions& o) {
  const Shape& s = x.shape();
  TANDEM_CHECK(
      s.rank() >= 1 && w.shape().rank() == 2 && w.shape()[1] == s[s.rank() - 1] && w.shape()[0] > 0 && w.shape()[1] > 0,
      ErrorCode::kInvalidArgument,
      "linear_cross_entropy_loss: x {} must end in the features of w {} (classes, features)", s.str(), w.shape().str());
  const int64_t features = s[s.rank() - 1], rows = features > 0 ? s.numel() / features : 0;
  TANDEM_CHECK(labels.defined() && labels.numel() == rows, ErrorCode::kInvalidArgument,
               "linear_cross_entropy_loss: {} labels for {} rows of x {}; give one label per row",
               labels.defined() ? labels.numel() : 0, rows, s.str());
  TANDEM_CHECK(o.divisor > 0 && o.chunk_elements >= 0, ErrorCode::kInvalidArgument,
               "linear_cross_entropy_loss: divisor {} must be positive and chunk_elements {} not negative", o.divisor,
               o.chunk_elements);
  return {rows, features, w.shape()[0]};
}

// The summed losses, and (when wanted) the gradients of x (rows, features) and w for dloss = 1.
struct FusedResult {
  Tensor losses, dx, dw;
};

FusedResult run_chunks(ExecutionContext& ctx, const Problem& p, const Tensor& x, const Tensor& w, const Tensor& labels,
                       const LinearCrossEntropyOptions& o, bool need_dx, bool need_dw) {
  const int64_t budget = o.chunk_elements > 0 ? o.chunk_elements : kDefaultChunkElements;
  const int64_t chunk = std::max<int64_t>(1, budget / p.classes);
  const float scale = 1.0f / static_cast<float>(o.divisor);  // the bits cross_entropy_loss's scale uses
  FusedResult r{Tensor::empty({p.rows}, DType::kF32, ctx.device()), Tensor(), Tensor()};
  if (need_dx) r.dx = Tensor::empty({p.rows, p.features}, DType::kF32, ctx.device());
  // x rounded once for every chunk's three products, w read from its bf16 shadow (backend::bf16_weight).
  const Tensor xo = backend::bf16_operand(ctx, x), wo = backend::bf16_weight(ctx, w);
  for (int64_t begin = 0; begin < p.rows; begin += chunk) {
    const int64_t n = std::min(chunk, p.rows - begin);
    const Tensor xc = row_window(xo, begin, n);
    Tensor logits = backend::linear_forward(ctx, xc, wo);
    // Loss and dlogits in one pass over the chunk; without a gradient to compute, scale 0.
    const Tensor loss =
        backend::softmax_cross_entropy_inplace(ctx, logits, row_window(labels, begin, n), o.label_smoothing,
                                               need_dx || need_dw ? scale : 0.0f, o.ignore_index);
    row_window(r.losses, begin, n).copy_from(loss);
    if (!need_dx && !need_dw) continue;
    const Tensor dlogits = backend::bf16_operand(ctx, logits);
    if (need_dx) row_window(r.dx, begin, n).copy_from(backend::linear_backward_data(ctx, dlogits, wo));
    if (!need_dw) continue;
    if (begin == 0) {
      r.dw = backend::linear_backward_weights(ctx, xc, dlogits, false).dw;
    } else {
      backend::linear_backward_weights_add(ctx, xc, dlogits, r.dw);
    }
  }
  if (need_dw && p.rows == 0) r.dw = Tensor::zeros(Shape{p.classes, p.features}, DType::kF32, ctx.device());
  return r;
}

// g (any shape) times the one element of dloss, read on the device.
Tensor times_scalar(ExecutionContext& ctx, const Tensor& g, const Tensor& dloss) {
  return backend::binary(ctx, backend::BinaryOp::kMul, g, dloss.reshape(Shape{1}));
}

}  // namespace

Variable linear_cross_entropy_loss(ExecutionContext& ctx, const Variable& x, const Variable& w, const Tensor& labels,
                                   const LinearCrossEntropyOptions& o) {
  const Problem p = check_problem(x, w, labels, o);
  const bool record = grad_enabled();
  const bool need_dx = record && x.requires_grad(), need_dw = record && w.requires_grad();
  FusedResult r = run_chunks(ctx, p, x.value().reshape(Shape{p.rows, p.features}), w.value(),
                             labels.reshape(Shape{p.rows}), o, need_dx, need_dw);
  // As cross_entropy_loss: the same sum of the same per-row losses, scaled by the same factor.
  Tensor loss = backend::scale(ctx, backend::sum(ctx, r.losses), 1.0f / static_cast<float>(o.divisor));
  const Shape x_shape = x.shape();
  return make_op("linear_cross_entropy", std::move(loss), {x, w},
                 [&ctx, dx = r.dx, dw = r.dw, x_shape](const Tensor& dloss) {
                   return std::vector<Tensor>{dx.defined() ? times_scalar(ctx, dx, dloss).reshape(x_shape) : Tensor(),
                                              dw.defined() ? times_scalar(ctx, dw, dloss) : Tensor()};
                 });
}

}  // namespace tandem::autograd
