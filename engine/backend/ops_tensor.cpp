// The checked entry points of ops.h for N-D tensors: permute, expand, narrow and concat,
// broadcasting pointwise ops, reductions over dimensions and softmax. Inputs are contiguous; a
// channels_last 4-D input is first laid out contiguously (a permute on the device).
#include <algorithm>
#include <vector>

#include "engine/backend/kernels.h"
#include "engine/backend/ops.h"
#include "engine/backend/ops_validate.h"

namespace tandem::backend {
namespace {

using namespace detail;

void check_any(std::string_view op, std::string_view arg, const Tensor& t, const Ctx& ctx) {
  TANDEM_CHECK(t.defined(), ErrorCode::kInvalidArgument, "{}: {} is undefined", op, arg);
  TANDEM_CHECK(t.device() == ctx.device(), ErrorCode::kInvalidArgument,
               "{}: {} ({}) is on {} but the context runs on {}; copy it there with .to({}) first", op, arg,
               t.describe(), t.device().str(), ctx.device().str(), ctx.device().str());
}

Shape with_dim(const Shape& s, int dim, int64_t size) {
  Shape out = s;
  out[dim] = size;
  return out;
}

}  // namespace

int normalize_dim(std::string_view op, int dim, int rank) {
  TANDEM_CHECK(dim >= -rank && dim < rank, ErrorCode::kInvalidArgument,
               "{}: dimension {} is out of range for a tensor of rank {} (valid: {} to {})", op, dim, rank, -rank,
               rank - 1);
  return dim < 0 ? dim + rank : dim;
}

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    const int da = d - (rank - a.rank()), db = d - (rank - b.rank());
    const int64_t sa = da >= 0 ? a[da] : 1, sb = db >= 0 ? b[db] : 1;
    TANDEM_CHECK(sa == sb || sa == 1 || sb == 1, ErrorCode::kInvalidArgument,
                 "{}: shapes {} and {} do not broadcast: dimension {} (from the right) is {} and {}", op, a.str(),
                 b.str(), rank - d, sa, sb);
    dims[static_cast<size_t>(d)] = sa == 1 ? sb : sa;
  }
  return Shape(std::span<const int64_t>(dims));
}

Tensor contiguous(Ctx& ctx, const Tensor& x) {
  if (x.format() == MemoryFormat::kContiguous) return x;
  // The channels_last buffer is a contiguous (N, H, W, C): permuted back to (N, C, H, W).
  Tensor nhwc = x.view(Shape{x.dim(0), x.dim(2), x.dim(3), x.dim(1)}, MemoryFormat::kContiguous);
  const int perm[] = {0, 3, 1, 2};
  return permute(ctx, nhwc, perm);
}

Tensor as_format(Ctx& ctx, const Tensor& x, MemoryFormat format) {
  if (x.format() == format) return x;
  if (format == MemoryFormat::kContiguous) return contiguous(ctx, x);
  TANDEM_CHECK(x.rank() == 4, ErrorCode::kInvalidArgument, "as_format: channels_last needs a 4-D tensor, got {}",
               x.describe());
  const int perm[] = {0, 2, 3, 1};  // (N, C, H, W) -> the (N, H, W, C) buffer
  return permute(ctx, x, perm).view(x.shape(), MemoryFormat::kChannelsLast);
}

Tensor permute(Ctx& ctx, const Tensor& x_in, std::span<const int> perm) {
  constexpr std::string_view op = "permute";
  check_any(op, "x", x_in, ctx);
  Tensor x = contiguous(ctx, x_in);
  TANDEM_CHECK(static_cast<int>(perm.size()) == x.rank(), ErrorCode::kInvalidArgument,
               "{}: {} dimensions given for x of shape {}", op, perm.size(), x.shape().str());
  std::vector<int> axes(perm.size());
  std::vector<int64_t> dims(perm.size());
  std::vector<char> seen(perm.size(), 0);
  for (size_t i = 0; i < perm.size(); ++i) {
    axes[i] = normalize_dim(op, perm[i], x.rank());
    TANDEM_CHECK(!seen[static_cast<size_t>(axes[i])], ErrorCode::kInvalidArgument,
                 "{}: dimension {} appears twice in the permutation", op, axes[i]);
    seen[static_cast<size_t>(axes[i])] = 1;
    dims[i] = x.dim(axes[i]);
  }
  Tensor y = Tensor::empty(Shape(std::span<const int64_t>(dims)), x.dtype(), ctx.device());
  entry(table(ctx).permute, op, ctx)(ctx, x, axes, y);
  return y;
}

Tensor transpose(Ctx& ctx, const Tensor& x, int dim0, int dim1) {
  std::vector<int> perm(static_cast<size_t>(x.rank()));
  for (int d = 0; d < x.rank(); ++d) perm[static_cast<size_t>(d)] = d;
  std::swap(perm[static_cast<size_t>(normalize_dim("transpose", dim0, x.rank()))],
            perm[static_cast<size_t>(normalize_dim("transpose", dim1, x.rank()))]);
  return permute(ctx, x, perm);
}

Tensor expand(Ctx& ctx, const Tensor& x_in, const Shape& shape) {
  constexpr std::string_view op = "expand";
  check_any(op, "x", x_in, ctx);
  Tensor x = contiguous(ctx, x_in);
  TANDEM_CHECK(broadcast_shapes(op, x.shape(), shape) == shape, ErrorCode::kInvalidArgument,
               "{}: x of shape {} does not broadcast to {}", op, x.shape().str(), shape.str());
  Tensor y = Tensor::empty(shape, x.dtype(), ctx.device());
  entry(table(ctx).expand, op, ctx)(ctx, x, y);
  return y;
}

Tensor narrow(Ctx& ctx, const Tensor& x_in, int dim, int64_t start, int64_t length) {
  constexpr std::string_view op = "narrow";
  check_any(op, "x", x_in, ctx);
  Tensor x = contiguous(ctx, x_in);
  dim = normalize_dim(op, dim, x.rank());
  TANDEM_CHECK(start >= 0 && length >= 0 && start + length <= x.dim(dim), ErrorCode::kInvalidArgument,
               "{}: [{}, {}) is outside dimension {} of x {} (size {})", op, start, start + length, dim,
               x.shape().str(), x.dim(dim));
  Tensor y = Tensor::empty(with_dim(x.shape(), dim, length), x.dtype(), ctx.device());
  entry(table(ctx).copy_window, op, ctx)(ctx, x, dim, start, y, 0, length);
  return y;
}

void narrow_assign(Ctx& ctx, Tensor& dst, int dim, int64_t start, const Tensor& src_in) {
  constexpr std::string_view op = "narrow_assign";
  check_any(op, "dst", dst, ctx);
  check_any(op, "src", src_in, ctx);
  TANDEM_CHECK(dst.format() == MemoryFormat::kContiguous, ErrorCode::kInvalidArgument,
               "{}: dst {} must be contiguous", op, dst.describe());
  Tensor src = contiguous(ctx, src_in);
  dim = normalize_dim(op, dim, dst.rank());
  const int64_t length = src.rank() == dst.rank() ? src.dim(dim) : -1;
  TANDEM_CHECK(length >= 0 && src.dtype() == dst.dtype() && with_dim(dst.shape(), dim, length) == src.shape() &&
                   start >= 0 && start + length <= dst.dim(dim),
               ErrorCode::kInvalidArgument, "{}: src {} does not fit dst {} at {} along dimension {}", op,
               src.describe(), dst.describe(), start, dim);
  entry(table(ctx).copy_window, op, ctx)(ctx, src, dim, 0, dst, start, length);
}

Tensor concat(Ctx& ctx, std::span<const Tensor> xs, int dim) {
  constexpr std::string_view op = "concat";
  TANDEM_CHECK(!xs.empty(), ErrorCode::kInvalidArgument, "{}: no tensors to concatenate", op);
  check_any(op, "xs[0]", xs[0], ctx);
  dim = normalize_dim(op, dim, xs[0].rank());
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    check_any(op, "xs[i]", xs[i], ctx);
    TANDEM_CHECK(xs[i].rank() == xs[0].rank() && xs[i].dtype() == xs[0].dtype() &&
                     with_dim(xs[i].shape(), dim, 0) == with_dim(xs[0].shape(), dim, 0),
                 ErrorCode::kInvalidArgument,
                 "{}: xs[{}] {} does not match xs[0] {} outside dimension {}", op, i, xs[i].describe(),
                 xs[0].describe(), dim);
    total += xs[i].dim(dim);
  }
  Tensor y = Tensor::empty(with_dim(xs[0].shape(), dim, total), xs[0].dtype(), ctx.device());
  int64_t at = 0;
  for (const Tensor& x : xs) {
    narrow_assign(ctx, y, dim, at, x);
    at += x.dim(dim);
  }
  return y;
}

Tensor binary(Ctx& ctx, BinaryOp bop, const Tensor& a_in, const Tensor& b_in) {
  constexpr std::string_view op = "binary";
  check_tensor(op, "a", a_in, ctx, DType::kF32, -1, "");
  check_tensor(op, "b", b_in, ctx, DType::kF32, -1, "");
  Tensor a = contiguous(ctx, a_in), b = contiguous(ctx, b_in);
  Tensor y = Tensor::empty(broadcast_shapes(op, a.shape(), b.shape()), DType::kF32, ctx.device());
  entry(table(ctx).binary, op, ctx)(ctx, bop, a, b, y);
  return y;
}

Tensor unary(Ctx& ctx, UnaryOp uop, const Tensor& x, bool bf16_output) {
  constexpr std::string_view op = "unary";
  check_tensor(op, "x", x, ctx, activation_dtype(ctx, x), -1, "");
  const DType y_type = bf16_output && keeps_bf16(ctx) ? DType::kBF16 : DType::kF32;
  Tensor y = Tensor::empty(x.shape(), y_type, ctx.device(), x.format());  // pointwise: any layout
  entry(table(ctx).unary, op, ctx)(ctx, uop, x, y);
  return y;
}

Tensor unary_backward(Ctx& ctx, UnaryOp uop, const Tensor& x, const Tensor& y, const Tensor& dy) {
  constexpr std::string_view op = "unary_backward";
  check_tensor(op, "x", x, ctx, activation_dtype(ctx, x), -1, "");
  const bool gelu = uop == UnaryOp::kGeluErf || uop == UnaryOp::kGeluTanh;
  TANDEM_CHECK(y.defined() || gelu, ErrorCode::kInvalidArgument,
               "{}: y is undefined, but this op's derivative reads its forward output", op);
  if (y.defined()) check_tensor(op, "y", y, ctx, DType::kF32, -1, "");
  check_same(op, "x", x, "y", y.defined() ? y : x);
  check_same(op, "x", x, "dy", dy);
  Tensor dx = Tensor::empty(x.shape(), DType::kF32, ctx.device(), x.format());
  // Without y, dy stands in for it (f32, of x's shape): no kernel reads y for GELU.
  entry(table(ctx).unary_backward, op, ctx)(ctx, uop, x, y.defined() ? y : dy, dy, dx);
  return dx;
}

Tensor masked_fill(Ctx& ctx, const Tensor& x_in, const Tensor& mask_in, float value) {
  constexpr std::string_view op = "masked_fill";
  check_tensor(op, "x", x_in, ctx, DType::kF32, -1, "");
  check_tensor(op, "mask", mask_in, ctx, DType::kU8, -1, "(broadcast to x)");
  Tensor x = contiguous(ctx, x_in), mask = contiguous(ctx, mask_in);
  TANDEM_CHECK(broadcast_shapes(op, mask.shape(), x.shape()) == x.shape(), ErrorCode::kInvalidArgument,
               "{}: mask of shape {} does not broadcast to x {}", op, mask.shape().str(), x.shape().str());
  Tensor y = Tensor::empty(x.shape(), DType::kF32, ctx.device());
  entry(table(ctx).masked_fill, op, ctx)(ctx, x, mask, value, y);
  return y;
}

namespace {

// The dims to reduce, normalised, unique, highest first (so each reduction leaves the lower
// dimensions' numbering alone).
std::vector<int> reduce_dims(std::string_view op, std::span<const int> dims, int rank) {
  std::vector<int> out;
  if (dims.empty()) {
    for (int d = 0; d < rank; ++d) out.push_back(d);
  }
  for (int d : dims) out.push_back(normalize_dim(op, d, rank));
  std::sort(out.begin(), out.end(), std::greater<>());
  TANDEM_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), ErrorCode::kInvalidArgument,
               "{}: a dimension appears twice", op);
  return out;
}

Shape squeeze_dims(const Shape& keep, const std::vector<int>& dims) {
  std::vector<int64_t> out;
  for (int d = 0; d < keep.rank(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) out.push_back(keep[d]);
  }
  return Shape(std::span<const int64_t>(out));
}

}  // namespace

Shape reduced_shape(std::string_view op, const Shape& x, std::span<const int> dims_in, bool keepdim) {
  const std::vector<int> dims = reduce_dims(op, dims_in, x.rank());
  Shape kept = x;
  for (int d : dims) kept[d] = 1;
  return keepdim ? kept : squeeze_dims(kept, dims);
}

Tensor reduce(Ctx& ctx, Reduction r, const Tensor& x_in, std::span<const int> dims_in, bool keepdim) {
  constexpr std::string_view op = "reduce";
  check_tensor(op, "x", x_in, ctx, DType::kF32, -1, "");
  Tensor y = contiguous(ctx, x_in);
  const std::vector<int> dims = reduce_dims(op, dims_in, y.rank());
  auto fn = entry(table(ctx).reduce_axis, op, ctx);
  for (int d : dims) {
    TANDEM_CHECK(r != Reduction::kMax || y.dim(d) > 0, ErrorCode::kInvalidArgument,
                 "{}: max over dimension {} of size 0 of {}", op, d, x_in.shape().str());
    Tensor out = Tensor::empty(with_dim(y.shape(), d, 1), DType::kF32, ctx.device());
    fn(ctx, r, y, d, out);
    y = out;
  }
  return keepdim ? y : y.reshape(squeeze_dims(y.shape(), dims));
}

Tensor max_backward(Ctx& ctx, const Tensor& x_in, std::span<const int> dims_in, const Tensor& dy_in) {
  constexpr std::string_view op = "max_backward";
  check_tensor(op, "x", x_in, ctx, DType::kF32, -1, "");
  Tensor x = contiguous(ctx, x_in);
  const std::vector<int> dims = reduce_dims(op, dims_in, x.rank());
  // The forward again, keeping each step's result: the gradient goes back through them in reverse.
  std::vector<Tensor> steps{x};
  for (int d : dims) steps.push_back(reduce(ctx, Reduction::kMax, steps.back(), std::span<const int>(&d, 1), true));
  Tensor grad = dy_in.reshape(steps.back().shape());
  auto fn = entry(table(ctx).max_axis_backward, op, ctx);
  for (size_t i = dims.size(); i-- > 0;) {
    Tensor dx = Tensor::empty(steps[i].shape(), DType::kF32, ctx.device());
    fn(ctx, steps[i], steps[i + 1], grad, dims[i], dx);
    grad = dx;
  }
  return grad;
}

Tensor sum_to(Ctx& ctx, const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int extra = x.rank() - shape.rank();
  TANDEM_CHECK(extra >= 0, ErrorCode::kInvalidArgument, "sum_to: {} has fewer dimensions than {}", x.shape().str(),
               shape.str());
  std::vector<int> dims;
  for (int d = 0; d < x.rank(); ++d) {
    if (d < extra || (shape[d - extra] == 1 && x.dim(d) != 1)) dims.push_back(d);
  }
  Tensor y = reduce(ctx, Reduction::kSum, x, dims, true);
  return y.reshape(shape);
}

Tensor softmax(Ctx& ctx, const Tensor& x_in, int dim, bool log) {
  constexpr std::string_view op = "softmax";
  check_tensor(op, "x", x_in, ctx, DType::kF32, -1, "");
  Tensor x = contiguous(ctx, x_in);
  dim = normalize_dim(op, dim, x.rank());
  Tensor y = Tensor::empty(x.shape(), DType::kF32, ctx.device());
  entry(table(ctx).softmax, op, ctx)(ctx, x, dim, log, y);
  return y;
}

Tensor softmax_backward(Ctx& ctx, const Tensor& y, const Tensor& dy, int dim, bool log) {
  constexpr std::string_view op = "softmax_backward";
  check_tensor(op, "y", y, ctx, DType::kF32, -1, "");
  check_same(op, "y", y, "dy", dy);
  dim = normalize_dim(op, dim, y.rank());
  Tensor dx = Tensor::empty(y.shape(), DType::kF32, ctx.device());
  entry(table(ctx).softmax_backward, op, ctx)(ctx, y, dy, dim, log, dx);
  return dx;
}

}  // namespace tandem::backend
