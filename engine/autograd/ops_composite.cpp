// The ops of composite.h, each a short chain of the tape's ops.
#include <limits>
#include <vector>

#include "engine/autograd/composite.h"
#include "engine/backend/factories.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

// x with a dimension of size 1 inserted at dim (in [0, rank]).
Variable unsqueeze(ExecutionContext& ctx, const Variable& x, int dim) {
  std::vector<int64_t> dims(x.shape().dims().begin(), x.shape().dims().end());
  dims.insert(dims.begin() + dim, 1);
  return reshape(ctx, x, Shape(std::span<const int64_t>(dims)));
}

int64_t count_reduced(const Shape& s, std::span<const int> dims) {
  if (dims.empty()) return s.numel();
  int64_t n = 1;
  for (int d : dims) n *= s[backend::normalize_dim("var", d, s.rank())];
  return n;
}

// The (rows, cols) mask of the elements tril (upper) or triu (upper false) zeroes, on x's device.
Tensor triangle_mask(const Variable& x, int64_t diagonal, bool upper_kept, const char* op) {
  const Shape s = x.shape();
  TANDEM_CHECK(s.rank() >= 2, ErrorCode::kInvalidArgument, "{}: input tensor must have at least 2 dimensions, got {}",
               op, s.str());
  const int64_t rows = s[s.rank() - 2], cols = s[s.rank() - 1];
  Tensor mask = Tensor::zeros({rows, cols}, DType::kU8);
  uint8_t* m = mask.data<uint8_t>();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) m[i * cols + j] = upper_kept ? (j - i < diagonal) : (j - i > diagonal);
  }
  return mask.to(x.value().device());
}

void check_same_shape(const char* op, const Variable& input, const Variable& target) {
  TANDEM_CHECK(input.shape() == target.shape(), ErrorCode::kInvalidArgument,
               "{}: target {} must have the input's shape {} (Tandem does not broadcast a loss's target)", op,
               target.shape().str(), input.shape().str());
}

Variable reduce(ExecutionContext& ctx, const Variable& elements, LossReduction reduction) {
  switch (reduction) {
    case LossReduction::kMean: return mean(ctx, elements, {}, false);
    case LossReduction::kSum: return sum(ctx, elements, {}, false);
    case LossReduction::kNone: return elements;
    case LossReduction::kBatchMean: break;
  }
  throw_error(ErrorCode::kInvalidArgument,
              "reduction kBatchMean is kl_div's alone (as PyTorch's 'batchmean'); use kMean, kSum or kNone");
}

// BCE with logits' gradients for an upstream g: (sigmoid(x) - y) g for the logits, -x g for the target.
Tensor bce_dlogits(ExecutionContext& ctx, const Tensor& x, const Tensor& y, const Tensor& g) {
  using backend::BinaryOp;
  const Tensor s = backend::unary(ctx, backend::UnaryOp::kSigmoid, x);
  return backend::binary(ctx, BinaryOp::kMul, backend::binary(ctx, BinaryOp::kSub, s, y), g);
}

Tensor bce_dtarget(ExecutionContext& ctx, const Tensor& x, const Tensor& g) {
  return backend::binary(ctx, backend::BinaryOp::kMul, backend::scale(ctx, x, -1.0f), g);
}

}  // namespace

Variable stack(ExecutionContext& ctx, std::span<const Variable> xs, int dim) {
  TANDEM_CHECK(!xs.empty(), ErrorCode::kInvalidArgument, "stack expects a non-empty list of tensors");
  const Shape first = xs[0].shape();
  for (size_t i = 1; i < xs.size(); ++i) {
    TANDEM_CHECK(xs[i].shape() == first, ErrorCode::kInvalidArgument,
                 "stack expects each tensor to be equal size, but got {} at entry 0 and {} at entry {}", first.str(),
                 xs[i].shape().str(), i);
  }
  const int at = backend::normalize_dim("stack", dim, first.rank() + 1);
  std::vector<Variable> parts;
  parts.reserve(xs.size());
  for (const Variable& x : xs) parts.push_back(unsqueeze(ctx, x, at));
  return concat(ctx, parts, at);
}

Variable var(ExecutionContext& ctx, const Variable& x, std::span<const int> dims, int64_t correction, bool keepdim) {
  const int64_t n = count_reduced(x.shape(), dims);
  Variable centred = sub(ctx, x, mean(ctx, x, dims, true));
  Variable squares = sum(ctx, mul(ctx, centred, centred), dims, keepdim);
  const double divisor = static_cast<double>(n - correction);  // <= 0: inf or nan, as torch.var
  return scale(ctx, squares, static_cast<float>(1.0 / divisor));
}

Variable std(ExecutionContext& ctx, const Variable& x, std::span<const int> dims, int64_t correction, bool keepdim) {
  return sqrt(ctx, var(ctx, x, dims, correction, keepdim));
}

Variable tril(ExecutionContext& ctx, const Variable& x, int64_t diagonal) {
  return masked_fill(ctx, x, triangle_mask(x, diagonal, false, "tril"), 0.0f);
}

Variable triu(ExecutionContext& ctx, const Variable& x, int64_t diagonal) {
  return masked_fill(ctx, x, triangle_mask(x, diagonal, true, "triu"), 0.0f);
}

Variable mse_loss(ExecutionContext& ctx, const Variable& input, const Variable& target, LossReduction reduction) {
  check_same_shape("mse_loss", input, target);
  Variable d = sub(ctx, input, target);
  return reduce(ctx, mul(ctx, d, d), reduction);
}

Variable l1_loss(ExecutionContext& ctx, const Variable& input, const Variable& target, LossReduction reduction) {
  check_same_shape("l1_loss", input, target);
  return reduce(ctx, abs(ctx, sub(ctx, input, target)), reduction);
}

Variable smooth_l1_loss(ExecutionContext& ctx, const Variable& input, const Variable& target, LossReduction reduction,
                        float beta) {
  check_same_shape("smooth_l1_loss", input, target);
  TANDEM_CHECK(beta >= 0.0f, ErrorCode::kInvalidArgument, "smooth_l1_loss: beta must be non-negative, got {}", beta);
  if (beta == 0.0f) return l1_loss(ctx, input, target, reduction);  // PyTorch's rule
  // With a = |d| and m = min(a, beta) = a - relu(a - beta): 0.5 m^2 / beta + (a - m) is the quadratic
  // below beta and the line above it, and its gradient is a / beta below, 1 above (relu's 0 at beta).
  Variable a = abs(ctx, sub(ctx, input, target));
  Variable beta_t(backend::full(ctx, a.shape(), beta));
  Variable m = sub(ctx, a, relu(ctx, sub(ctx, a, beta_t)));
  Variable elements = add(ctx, scale(ctx, mul(ctx, m, m), 0.5f / beta), sub(ctx, a, m));
  return reduce(ctx, elements, reduction);
}

Variable huber_loss(ExecutionContext& ctx, const Variable& input, const Variable& target, LossReduction reduction,
                    float delta) {
  TANDEM_CHECK(delta > 0.0f, ErrorCode::kInvalidArgument, "huber_loss: delta must be positive, got {}", delta);
  return scale(ctx, smooth_l1_loss(ctx, input, target, reduction, delta), delta);
}

Variable binary_cross_entropy_with_logits(ExecutionContext& ctx, const Variable& logits, const Variable& target,
                                          LossReduction reduction) {
  check_same_shape("binary_cross_entropy_with_logits", logits, target);
  const Tensor x = logits.value(), y = target.value();
  Tensor elements;
  {
    NoGradGuard values_only;  // the gradient is written out below
    const Variable vx(x), vy(y);
    const Variable softplus_tail =
        log(ctx, add(ctx, Variable(backend::ones(ctx, x.shape())), exp(ctx, scale(ctx, abs(ctx, vx), -1.0f))));
    elements = add(ctx, sub(ctx, relu(ctx, vx), mul(ctx, vx, vy)), softplus_tail).value();
  }
  Variable per_element =
      make_op("binary_cross_entropy_with_logits", std::move(elements), {logits, target},
              [&ctx, x, y](const Tensor& g) { return std::vector<Tensor>{bce_dlogits(ctx, x, y, g), bce_dtarget(ctx, x, g)}; });
  return reduce(ctx, per_element, reduction);
}

Variable kl_div(ExecutionContext& ctx, const Variable& input, const Variable& target, LossReduction reduction,
                bool log_target) {
  check_same_shape("kl_div", input, target);
  Variable elements;
  if (log_target) {
    elements = mul(ctx, exp(ctx, target), sub(ctx, target, input));
  } else {
    // xlogy(t, t) as t log(max(t, tiny)), max(t, tiny) = tiny + relu(t - tiny): 0 at t = 0 (0 log tiny),
    // and exactly t log t above tiny, since tiny is below half an ulp of any such t.
    const Variable tiny(backend::full(ctx, Shape{}, std::numeric_limits<float>::min()));
    const Variable clamped = add(ctx, tiny, relu(ctx, sub(ctx, target, tiny)));
    elements = mul(ctx, target, sub(ctx, log(ctx, clamped), input));
  }
  if (reduction != LossReduction::kBatchMean) return reduce(ctx, elements, reduction);
  const int64_t batch = input.shape().rank() > 0 ? input.shape()[0] : 1;
  return scale(ctx, sum(ctx, elements, {}, false), static_cast<float>(1.0 / static_cast<double>(batch)));
}

}  // namespace tandem::autograd
