// Entry points of the selection kernels: comparisons into u8 masks, where, dtype casts and gather.
#include <string_view>
#include <vector>

#include "engine/backend/factories.h"
#include "engine/backend/kernels.h"
#include "engine/backend/ops.h"
#include "engine/backend/ops_validate.h"

namespace tandem::backend {

using namespace detail;

Tensor compare(Ctx& ctx, CompareOp cop, const Tensor& a_in, const Tensor& b_in) {
  constexpr std::string_view op = "compare";
  TANDEM_CHECK(a_in.defined() && (a_in.dtype() == DType::kF32 || a_in.dtype() == DType::kI64),
               ErrorCode::kInvalidArgument, "{}: a must be an f32 or i64 tensor, got {}", op, a_in.describe());
  check_tensor(op, "a", a_in, ctx, a_in.dtype(), -1, "");
  check_tensor(op, "b", b_in, ctx, a_in.dtype(), -1, "(a's dtype)");
  Tensor a = contiguous(ctx, a_in), b = contiguous(ctx, b_in);
  Tensor y = Tensor::empty(broadcast_shapes(op, a.shape(), b.shape()), DType::kU8, ctx.device());
  entry(table(ctx).compare, op, ctx)(ctx, cop, a, b, y);
  return y;
}

Tensor compare(Ctx& ctx, CompareOp cop, const Tensor& a, double b) {
  TANDEM_CHECK(a.defined(), ErrorCode::kInvalidArgument, "compare: a is undefined");
  return compare(ctx, cop, a, full(ctx, Shape{}, b, a.dtype()));
}

Tensor where(Ctx& ctx, const Tensor& cond_in, const Tensor& a_in, const Tensor& b_in) {
  constexpr std::string_view op = "where";
  check_tensor(op, "cond", cond_in, ctx, DType::kU8, -1, "(a u8 mask)");
  check_tensor(op, "a", a_in, ctx, DType::kF32, -1, "");
  check_tensor(op, "b", b_in, ctx, DType::kF32, -1, "");
  Tensor cond = contiguous(ctx, cond_in), a = contiguous(ctx, a_in), b = contiguous(ctx, b_in);
  const Shape shape = broadcast_shapes(op, cond.shape(), broadcast_shapes(op, a.shape(), b.shape()));
  Tensor y = Tensor::empty(shape, DType::kF32, ctx.device());
  entry(table(ctx).where, op, ctx)(ctx, cond, a, b, y);
  return y;
}

Tensor cast(Ctx& ctx, const Tensor& x_in, DType dtype) {
  constexpr std::string_view op = "cast";
  TANDEM_CHECK(x_in.defined() && (x_in.dtype() == DType::kF32 || x_in.dtype() == DType::kI64 ||
                                  x_in.dtype() == DType::kU8),
               ErrorCode::kInvalidArgument, "{}: x must be an f32, i64 or u8 tensor, got {}", op, x_in.describe());
  TANDEM_CHECK(dtype == DType::kF32 || dtype == DType::kI64, ErrorCode::kUnimplemented,
               "{}: to {} is not implemented (f32 and i64 are)", op, dtype_name(dtype));
  check_tensor(op, "x", x_in, ctx, x_in.dtype(), -1, "");
  if (x_in.dtype() == dtype) return x_in;
  Tensor x = contiguous(ctx, x_in);
  Tensor y = Tensor::empty(x.shape(), dtype, ctx.device());
  entry(table(ctx).cast, op, ctx)(ctx, x, y);
  return y;
}

namespace {

// index: i64 of x's rank, each size at most x's but along dim (torch.gather's rule).
int check_gather(std::string_view op, Ctx& ctx, const Shape& x, int dim, const Tensor& index) {
  check_tensor(op, "index", index, ctx, DType::kI64, x.rank(), "(x's rank)");
  const int d = normalize_dim(op, dim, x.rank());
  for (int k = 0; k < x.rank(); ++k) {
    TANDEM_CHECK(k == d || index.dim(k) <= x[k], ErrorCode::kInvalidArgument,
                 "{}: index {} is larger than x {} in dimension {} (only dimension {}, dim, may differ)", op,
                 index.shape().str(), x.str(), k, d);
  }
  return d;
}

}  // namespace

Tensor gather(Ctx& ctx, const Tensor& x_in, int dim, const Tensor& index_in) {
  constexpr std::string_view op = "gather";
  check_tensor(op, "x", x_in, ctx, DType::kF32, -1, "");
  TANDEM_CHECK(x_in.shape().rank() >= 1, ErrorCode::kInvalidArgument, "{}: x must have a dimension, got {}", op,
               x_in.describe());
  const int d = check_gather(op, ctx, x_in.shape(), dim, index_in);
  Tensor x = contiguous(ctx, x_in), index = contiguous(ctx, index_in);
  Tensor y = Tensor::empty(index.shape(), DType::kF32, ctx.device());
  entry(table(ctx).gather, op, ctx)(ctx, x, d, index, y);
  return y;
}

Tensor gather_backward(Ctx& ctx, const Tensor& dy_in, int dim, const Tensor& index_in, const Shape& x_shape) {
  constexpr std::string_view op = "gather_backward";
  const int d = check_gather(op, ctx, x_shape, dim, index_in);
  check_tensor(op, "dy", dy_in, ctx, DType::kF32, x_shape.rank(), "(index's shape)");
  TANDEM_CHECK(dy_in.shape() == index_in.shape(), ErrorCode::kInvalidArgument, "{}: dy {} must have index's shape {}",
               op, dy_in.shape().str(), index_in.shape().str());
  Tensor dy = contiguous(ctx, dy_in), index = contiguous(ctx, index_in);
  Tensor dx = Tensor::empty(x_shape, DType::kF32, ctx.device());
  entry(table(ctx).gather_backward, op, ctx)(ctx, dy, d, index, dx);
  return dx;
}

Tensor topk_indices(Ctx& ctx, const Tensor& x_in, int64_t k, int dim, bool largest) {
  constexpr std::string_view op = "topk";
  check_tensor(op, "x", x_in, ctx, DType::kF32, -1, "");
  const Shape s = x_in.shape();
  const int d = normalize_dim(op, dim, s.rank() > 0 ? s.rank() : 1);
  const int64_t n = s.rank() > 0 ? s[d] : 1;
  TANDEM_CHECK(k >= 0 && k <= n, ErrorCode::kInvalidArgument, "{}: k {} is outside [0, {}] (dimension {} of {})", op,
               k, n, d, s.str());
  const int last = s.rank() > 0 ? s.rank() - 1 : 0;
  const Tensor moved = contiguous(ctx, d == last ? x_in : transpose(ctx, x_in, d, last));
  std::vector<int64_t> dims(moved.shape().dims().begin(), moved.shape().dims().end());
  if (dims.empty()) dims.push_back(1);
  dims.back() = k;
  Tensor indices = Tensor::empty(Shape(std::span<const int64_t>(dims)), DType::kI64, ctx.device());
  const int64_t rows = n > 0 ? moved.numel() / n : 0;
  if (rows > 0 && k > 0) {
    Tensor flat_indices = indices.reshape(Shape{rows, k});
    entry(table(ctx).topk_indices, op, ctx)(ctx, moved.reshape(Shape{rows, n}), k, largest, flat_indices);
  }
  if (s.rank() == 0) return k == 0 ? indices : indices.reshape(Shape{});
  return d == last ? indices : contiguous(ctx, transpose(ctx, indices, d, last));
}

}  // namespace tandem::backend
