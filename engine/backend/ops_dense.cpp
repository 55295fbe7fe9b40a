// The checked entry points of ops.h for matrix products, elementwise ops, the sum, softmax
// cross-entropy and dropout: validate once, allocate outputs, call the device's kernel table.
#include "engine/backend/ops.h"

#include "engine/backend/kernels.h"
#include "engine/backend/ops_validate.h"

namespace tandem::backend {
namespace {

using namespace detail;

void check_f32(std::string_view op, std::string_view arg, const Tensor& t, const Ctx& ctx) {
  check_tensor(op, arg, t, ctx, DType::kF32, -1, "");
}

// Empty products never reach a library (oneDNN divides by a zero dimension: SIGFPE): a result with
// no elements is returned as it is, and a sum over K = 0 terms is zeros, as PyTorch gives.
bool empty_product(Ctx& ctx, Tensor& out, int64_t k) {
  if (out.numel() == 0) return true;
  if (k != 0) return false;
  fill(ctx, 0.0f, out);
  return true;
}

}  // namespace

Tensor matmul(Ctx& ctx, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  constexpr std::string_view op = "matmul";
  check_tensor(op, "a", a, ctx, DType::kF32, 2, transpose_a ? "(K, M)" : "(M, K)");
  check_tensor(op, "b", b, ctx, DType::kF32, 2, transpose_b ? "(N, K)" : "(K, N)");
  int64_t ka = transpose_a ? a.dim(0) : a.dim(1);
  int64_t kb = transpose_b ? b.dim(1) : b.dim(0);
  TANDEM_CHECK(ka == kb, ErrorCode::kInvalidArgument,
               "{}: a has shape {} (K = {} with transpose_a = {}) but b has shape {} (K = {} with transpose_b = {})",
               op, a.shape().str(), ka, transpose_a, b.shape().str(), kb, transpose_b);
  auto fn = entry(table(ctx).matmul, op, ctx);
  Tensor c = like(ctx, {transpose_a ? a.dim(1) : a.dim(0), transpose_b ? b.dim(0) : b.dim(1)},
                  MemoryFormat::kContiguous);
  if (empty_product(ctx, c, ka)) return c;
  fn(ctx, a, b, transpose_a, transpose_b, c);
  return c;
}

Tensor linear_forward(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b_in, bool bf16_output) {
  constexpr std::string_view op = "linear_forward";
  const bool bf16_y = bf16_output && keeps_bf16(ctx);
  check_tensor(op, "x", x, ctx, operand_dtype(ctx, x), 2, "(N, in)");
  check_tensor(op, "w", w, ctx, operand_dtype(ctx, w), 2, "(out, in)");
  TANDEM_CHECK(w.dim(1) == x.dim(1), ErrorCode::kInvalidArgument,
               "{}: w has shape {} but x has {} features ({}); w must be (out, {})", op, w.shape().str(), x.dim(1),
               x.shape().str(), x.dim(1));
  if (b_in.defined()) check_vector(op, "b", b_in, ctx, w.dim(0), "outputs", "w", w.shape());
  auto fn = entry(table(ctx).linear_forward, op, ctx);
  const Shape y_shape{x.dim(0), w.dim(0)};
  if (x.dim(1) == 0 && y_shape.numel() > 0) {  // no input features: every row is the bias, or zeros
    Tensor y = b_in.defined() ? expand(ctx, b_in.reshape({1, w.dim(0)}), y_shape)
                              : like(ctx, y_shape, MemoryFormat::kContiguous);
    if (!b_in.defined()) fill(ctx, 0.0f, y);
    return bf16_y ? bf16_operand(ctx, y) : y;
  }
  Tensor y = like(ctx, y_shape, MemoryFormat::kContiguous, bf16_y ? DType::kBF16 : DType::kF32);
  if (y.numel() == 0) return y;
  // A bf16 y takes its bias in bf16 (cuBLASLt's epilogue reads the bias in D's type; autocast rounds it too).
  const Tensor b = bf16_y && b_in.defined() ? bf16_weight(ctx, b_in) : b_in;
  fn(ctx, x, w, b, y);
  return y;
}

Tensor linear_backward_data(Ctx& ctx, const Tensor& dy, const Tensor& w) {
  constexpr std::string_view op = "linear_backward_data";
  check_tensor(op, "dy", dy, ctx, operand_dtype(ctx, dy), 2, "(N, out)");
  check_tensor(op, "w", w, ctx, operand_dtype(ctx, w), 2, "(out, in)");
  TANDEM_CHECK(w.dim(0) == dy.dim(1), ErrorCode::kInvalidArgument,
               "{}: w has shape {} but dy has {} outputs ({}); w must be ({}, in)", op, w.shape().str(), dy.dim(1),
               dy.shape().str(), dy.dim(1));
  auto fn = entry(table(ctx).linear_backward_data, op, ctx);
  Tensor dx = like(ctx, {dy.dim(0), w.dim(1)}, MemoryFormat::kContiguous);
  if (empty_product(ctx, dx, dy.dim(1))) return dx;
  fn(ctx, dy, w, dx);
  return dx;
}

namespace {

void check_weight_grad_operands(std::string_view op, Ctx& ctx, const Tensor& x, const Tensor& dy) {
  check_tensor(op, "x", x, ctx, operand_dtype(ctx, x), 2, "(N, in)");
  check_tensor(op, "dy", dy, ctx, operand_dtype(ctx, dy), 2, "(N, out)");
  TANDEM_CHECK(x.dim(0) == dy.dim(0), ErrorCode::kInvalidArgument,
               "{}: dy has shape {} but x has shape {}; their batch sizes (first dimension) must agree", op,
               dy.shape().str(), x.shape().str());
}

}  // namespace

LinearWeightGrads linear_backward_weights(Ctx& ctx, const Tensor& x, const Tensor& dy, bool with_bias) {
  constexpr std::string_view op = "linear_backward_weights";
  check_weight_grad_operands(op, ctx, x, dy);
  auto fn = entry(table(ctx).linear_backward_weights, op, ctx);
  LinearWeightGrads g{like(ctx, {dy.dim(1), x.dim(1)}, MemoryFormat::kContiguous), Tensor()};
  if (with_bias) g.db = like(ctx, {dy.dim(1)}, MemoryFormat::kContiguous);
  if (x.dim(0) == 0 || dy.dim(1) == 0) {  // no rows: zero gradients; no outputs: nothing to compute
    if (g.dw.numel() > 0) fill(ctx, 0.0f, g.dw);
    if (with_bias && g.db.numel() > 0) fill(ctx, 0.0f, g.db);
    return g;
  }
  if (x.dim(1) == 0) {  // no input features: dw is empty, db still sums dy's rows
    if (with_bias) {
      Tensor dy32 = dy;
      if (dy.dtype() == DType::kBF16) {
        dy32 = like(ctx, dy.shape(), MemoryFormat::kContiguous);
        entry(table(ctx).from_bf16, op, ctx)(ctx, dy, dy32);
      }
      g.db = sum_to(ctx, dy32, {1, dy.dim(1)}).reshape({dy.dim(1)});
    }
    return g;
  }
  fn(ctx, x, dy, g.dw, g.db);
  return g;
}

void linear_backward_weights_add(Ctx& ctx, const Tensor& x, const Tensor& dy, Tensor& dw) {
  constexpr std::string_view op = "linear_backward_weights_add";
  check_weight_grad_operands(op, ctx, x, dy);
  check_tensor(op, "dw", dw, ctx, DType::kF32, 2, "(out, in)");
  TANDEM_CHECK(dw.dim(0) == dy.dim(1) && dw.dim(1) == x.dim(1), ErrorCode::kInvalidArgument,
               "{}: dw has shape {} but dy {} and x {} make a ({}, {}) gradient", op, dw.shape().str(),
               dy.shape().str(), x.shape().str(), dy.dim(1), x.dim(1));
  if (x.dim(0) == 0 || dw.numel() == 0) return;  // an empty sum adds nothing
  if (auto fn = table(ctx).linear_backward_weights_add) return fn(ctx, x, dy, dw);
  axpy(ctx, 1.0f, linear_backward_weights(ctx, x, dy, false).dw, dw);
}

namespace {

using BinaryKernel = void (*)(Ctx&, const Tensor& a, const Tensor& b, Tensor& y);

// y = kernel(a, b) for two f32 operands of one shape and memory format, y like them.
Tensor elementwise_binary(Ctx& ctx, std::string_view op, BinaryKernel kernel, const Tensor& a, const Tensor& b) {
  check_f32(op, "a", a, ctx);
  check_f32(op, "b", b, ctx);
  check_same(op, "a", a, "b", b);
  auto fn = entry(kernel, op, ctx);
  Tensor y = like(ctx, a.shape(), a.format());
  fn(ctx, a, b, y);
  return y;
}

}  // namespace

Tensor add(Ctx& ctx, const Tensor& a, const Tensor& b) { return elementwise_binary(ctx, "add", table(ctx).add, a, b); }

Tensor add_relu(Ctx& ctx, const Tensor& a, const Tensor& b) {
  return elementwise_binary(ctx, "add_relu", table(ctx).add_relu, a, b);
}

Tensor mul(Ctx& ctx, const Tensor& a, const Tensor& b) { return elementwise_binary(ctx, "mul", table(ctx).mul, a, b); }

Tensor scale(Ctx& ctx, const Tensor& x, float alpha) {
  check_f32("scale", "x", x, ctx);
  auto fn = entry(table(ctx).scale, "scale", ctx);
  Tensor y = like(ctx, x.shape(), x.format());
  fn(ctx, x, alpha, y);
  return y;
}

void axpy(Ctx& ctx, float alpha, const Tensor& x, Tensor& y) {
  check_f32("axpy", "x", x, ctx);
  check_f32("axpy", "y", y, ctx);
  check_same("axpy", "x", x, "y", y);
  entry(table(ctx).axpy, "axpy", ctx)(ctx, alpha, x, y);
}

void fill(Ctx& ctx, float value, Tensor& y) {
  check_f32("fill", "y", y, ctx);
  entry(table(ctx).fill, "fill", ctx)(ctx, value, y);
  y.bump_version();  // a parameter filled in place (an init) must not keep a stale bf16 shadow
}

Tensor sum(Ctx& ctx, const Tensor& x) {
  check_f32("sum", "x", x, ctx);
  auto fn = entry(table(ctx).sum, "sum", ctx);
  Tensor y = like(ctx, Shape(), MemoryFormat::kContiguous);
  fn(ctx, x, y);
  return y;
}

Tensor broadcast_scalar(Ctx& ctx, const Tensor& s, const Shape& shape, MemoryFormat format) {
  check_f32("broadcast_scalar", "s", s, ctx);
  TANDEM_CHECK(s.numel() == 1, ErrorCode::kInvalidArgument, "broadcast_scalar: s is {}; it must hold one element",
               s.describe());
  auto fn = entry(table(ctx).broadcast_scalar, "broadcast_scalar", ctx);
  Tensor y = like(ctx, shape, format);
  fn(ctx, s, y);
  return y;
}

namespace {

void check_labels(std::string_view op, const Tensor& labels, const Ctx& ctx, const Tensor& ref,
                  std::string_view ref_name) {
  check_tensor(op, "labels", labels, ctx, DType::kI64, 1, "(N)");
  TANDEM_CHECK(labels.dim(0) == ref.dim(0), ErrorCode::kInvalidArgument,
               "{}: labels has shape {} but {} has {} rows ({}); labels must be ({})", op, labels.shape().str(),
               ref_name, ref.dim(0), ref.shape().str(), ref.dim(0));
}

void check_smoothing(std::string_view op, float s) {
  TANDEM_CHECK(s >= 0.0f && s <= 1.0f, ErrorCode::kInvalidArgument, "{}: label_smoothing = {} must lie in [0, 1]",
               op, s);
}

}  // namespace

SoftmaxCrossEntropyForward softmax_cross_entropy_forward(Ctx& ctx, const Tensor& logits, const Tensor& labels,
                                                         float label_smoothing, int64_t ignore_index) {
  constexpr std::string_view op = "softmax_cross_entropy_forward";
  check_tensor(op, "logits", logits, ctx, DType::kF32, 2, "(N, K)");
  TANDEM_CHECK(logits.dim(1) > 0, ErrorCode::kInvalidArgument, "{}: logits {} has no classes", op,
               logits.shape().str());
  check_labels(op, labels, ctx, logits, "logits");
  check_smoothing(op, label_smoothing);
  auto fn = entry(table(ctx).softmax_cross_entropy_forward, op, ctx);
  SoftmaxCrossEntropyForward out{like(ctx, {logits.dim(0)}, MemoryFormat::kContiguous),
                                 like(ctx, logits.shape(), MemoryFormat::kContiguous)};
  fn(ctx, logits, labels, label_smoothing, ignore_index, out.loss, out.probs);
  return out;
}

Tensor softmax_cross_entropy_backward(Ctx& ctx, const Tensor& probs, const Tensor& labels, float label_smoothing,
                                      const Tensor& dloss, int64_t ignore_index) {
  constexpr std::string_view op = "softmax_cross_entropy_backward";
  check_tensor(op, "probs", probs, ctx, DType::kF32, 2, "(N, K)");
  check_labels(op, labels, ctx, probs, "probs");
  check_smoothing(op, label_smoothing);
  check_tensor(op, "dloss", dloss, ctx, DType::kF32, 1, "(N)");
  TANDEM_CHECK(dloss.dim(0) == probs.dim(0), ErrorCode::kInvalidArgument,
               "{}: dloss has shape {} but probs has {} rows ({}); dloss must be ({})", op, dloss.shape().str(),
               probs.dim(0), probs.shape().str(), probs.dim(0));
  auto fn = entry(table(ctx).softmax_cross_entropy_backward, op, ctx);
  Tensor dlogits = like(ctx, probs.shape(), MemoryFormat::kContiguous);
  fn(ctx, probs, labels, label_smoothing, ignore_index, dloss, dlogits);
  return dlogits;
}

Tensor softmax_cross_entropy_inplace(Ctx& ctx, Tensor& logits, const Tensor& labels, float label_smoothing,
                                     float scale, int64_t ignore_index) {
  constexpr std::string_view op = "softmax_cross_entropy_inplace";
  check_tensor(op, "logits", logits, ctx, DType::kF32, 2, "(N, K)");
  TANDEM_CHECK(logits.dim(1) > 0, ErrorCode::kInvalidArgument, "{}: logits {} has no classes", op,
               logits.shape().str());
  check_labels(op, labels, ctx, logits, "logits");
  check_smoothing(op, label_smoothing);
  auto fn = entry(table(ctx).softmax_cross_entropy_inplace, op, ctx);
  Tensor loss = like(ctx, {logits.dim(0)}, MemoryFormat::kContiguous);
  fn(ctx, logits, labels, label_smoothing, ignore_index, scale, loss);
  return loss;
}

namespace {

void check_probability(std::string_view op, float p) {
  TANDEM_CHECK(p >= 0.0f && p <= 1.0f, ErrorCode::kInvalidArgument, "{}: p = {} must lie in [0, 1]", op, p);
}

}  // namespace

DropoutForward dropout_forward(Ctx& ctx, const Tensor& x, float p) {
  constexpr std::string_view op = "dropout_forward";
  check_f32(op, "x", x, ctx);
  check_probability(op, p);
  auto fn = entry(table(ctx).dropout_forward, op, ctx);
  DropoutForward out{like(ctx, x.shape(), x.format()), like(ctx, x.shape(), x.format(), DType::kU8)};
  fn(ctx, x, p, out.y, out.mask);
  return out;
}

Tensor dropout_backward(Ctx& ctx, const Tensor& dy, const Tensor& mask, float p) {
  constexpr std::string_view op = "dropout_backward";
  check_f32(op, "dy", dy, ctx);
  check_tensor(op, "mask", mask, ctx, DType::kU8, -1, "(from dropout_forward)");
  check_same(op, "dy", dy, "mask", mask);
  check_probability(op, p);
  auto fn = entry(table(ctx).dropout_backward, op, ctx);
  Tensor dx = like(ctx, dy.shape(), dy.format());
  fn(ctx, dy, mask, p, dx);
  return dx;
}

}  // namespace tandem::backend

namespace tandem::backend {

void accumulate_classification_stats(Ctx& ctx, const Tensor& loss, float loss_scale, const Tensor& logits,
                                     const Tensor& labels, Tensor& stats) {
  constexpr std::string_view op = "accumulate_classification_stats";
  detail::check_tensor(op, "loss", loss, ctx, DType::kF32, -1, "[] or (1)");
  TANDEM_CHECK(loss.numel() == 1, ErrorCode::kInvalidArgument, "{}: loss is {}; it must be one value", op,
               loss.describe());
  detail::check_tensor(op, "logits", logits, ctx, DType::kF32, 2, "(N, K)");
  detail::check_tensor(op, "labels", labels, ctx, DType::kI64, 1, "(N)");
  TANDEM_CHECK(labels.dim(0) == logits.dim(0), ErrorCode::kInvalidArgument, "{}: labels {} for logits {}", op,
               labels.shape().str(), logits.shape().str());
  detail::check_tensor(op, "stats", stats, ctx, DType::kF32, 1, "(3)");
  TANDEM_CHECK(stats.dim(0) == 3, ErrorCode::kInvalidArgument, "{}: stats is {}; it must be (3)", op,
               stats.shape().str());
  detail::entry(detail::table(ctx).accumulate_classification_stats, op, ctx)(ctx, loss, loss_scale, logits, labels,
                                                                             stats);
}

}  // namespace tandem::backend
