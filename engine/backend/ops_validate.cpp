// Argument checks of the op entry points: tensors, shapes, formats and convolution/pooling
// geometry, each message naming the op, the argument and both shapes.
#include "engine/backend/ops_validate.h"

#include "engine/backend/ops.h"
#include "engine/backend/registry.h"

namespace tandem::backend::detail {

void check_tensor(std::string_view op, std::string_view arg, const Tensor& t, const Ctx& ctx, DType dtype, int rank,
                  std::string_view layout) {
  TANDEM_CHECK(t.defined(), ErrorCode::kInvalidArgument, "{}: {} is undefined; expected a {} tensor {}", op, arg,
               dtype_name(dtype), layout);
  TANDEM_CHECK(t.device() == ctx.device(), ErrorCode::kInvalidArgument,
               "{}: {} ({}) is on {} but the context runs on {}; copy it there with .to({}) first", op, arg,
               t.describe(), t.device().str(), ctx.device().str(), ctx.device().str());
  TANDEM_CHECK(t.dtype() == dtype, ErrorCode::kInvalidArgument, "{}: {} must be {}, got {} ({})", op, arg,
               dtype_name(dtype), dtype_name(t.dtype()), t.describe());
  TANDEM_CHECK(rank < 0 || t.rank() == rank, ErrorCode::kInvalidArgument, "{}: {} must be {}-D {}, got shape {}", op,
               arg, rank, layout, t.shape().str());
}

void check_same(std::string_view op, std::string_view a_name, const Tensor& a, std::string_view b_name,
                const Tensor& b) {
  TANDEM_CHECK(a.shape() == b.shape(), ErrorCode::kInvalidArgument,
               "{}: {} has shape {} but {} has shape {}; they must be equal", op, b_name, b.shape().str(), a_name,
               a.shape().str());
  check_same_format(op, a_name, a, b_name, b);
}

void check_same_format(std::string_view op, std::string_view a_name, const Tensor& a, std::string_view b_name,
                       const Tensor& b) {
  TANDEM_CHECK(a.format() == b.format(), ErrorCode::kInvalidArgument,
               "{}: {} {} is {} but {} {} is {}; convert one with to_format so the formats agree", op, b_name,
               b.shape().str(), memory_format_name(b.format()), a_name, a.shape().str(),
               memory_format_name(a.format()));
}

void check_vector(std::string_view op, std::string_view arg, const Tensor& v, const Ctx& ctx, int64_t n,
                  std::string_view what, std::string_view ref_name, const Shape& ref) {
  check_tensor(op, arg, v, ctx, DType::kF32, -1, "vector");
  TANDEM_CHECK(v.rank() == 1 && v.dim(0) == n, ErrorCode::kInvalidArgument,
               "{}: {} has shape {} but {} has {} {} ({}); {} must be ({})", op, arg, v.shape().str(), ref_name, n,
               what, ref.str(), arg, n);
}

void check_shape4(std::string_view op, std::string_view arg, const Shape& s, std::string_view layout) {
  TANDEM_CHECK(s.rank() == 4, ErrorCode::kInvalidArgument, "{}: {} must be 4-D {}, got {}", op, arg, layout,
               s.str());
}

namespace {

void check_pair(std::string_view op, std::string_view what, const std::array<int64_t, 2>& v, int64_t min) {
  TANDEM_CHECK(v[0] >= min && v[1] >= min, ErrorCode::kInvalidArgument, "{}: {} ({}, {}) must be at least {}", op,
               what, v[0], v[1], min);
}

// One spatial output size; throws when the (dilated) kernel does not fit the padded input.
int64_t output_size(std::string_view op, std::string_view x_name, const Shape& x, int axis, int64_t kernel,
                    int64_t stride, int64_t pad, int64_t dilation) {
  int64_t in = x[axis] + 2 * pad;
  int64_t span = dilation * (kernel - 1) + 1;
  TANDEM_CHECK(span <= in, ErrorCode::kInvalidArgument,
               "{}: the kernel spans {} along {} (size {}, dilation {}) but {} {} is only {} there with padding {}; "
               "the output would be empty",
               op, span, axis == 2 ? "H" : "W", kernel, dilation, x_name, x.str(), in, pad);
  return (in - span) / stride + 1;
}

}  // namespace

Shape conv_output_shape(std::string_view op, const Conv2dParams& p, const Shape& x, std::string_view x_name,
                        const Shape& w, std::string_view w_name) {
  check_pair(op, "stride", p.stride, 1);
  check_pair(op, "dilation", p.dilation, 1);
  check_pair(op, "padding", p.padding, 0);
  TANDEM_CHECK(p.groups >= 1, ErrorCode::kInvalidArgument, "{}: groups = {} must be at least 1", op, p.groups);
  TANDEM_CHECK(x[1] % p.groups == 0 && w[0] % p.groups == 0, ErrorCode::kInvalidArgument,
               "{}: groups = {} must divide both the {} channels of {} ({}) and the {} filters of {} ({})", op,
               p.groups, x[1], x_name, x.str(), w[0], w_name, w.str());
  TANDEM_CHECK(w[1] * p.groups == x[1], ErrorCode::kInvalidArgument,
               "{}: {} has shape {} but {} has {} channels ({}); {} must be (K, C/groups, R, S) with groups = {}", op,
               w_name, w.str(), x_name, x[1], x.str(), w_name, p.groups);
  int64_t h = output_size(op, x_name, x, 2, w[2], p.stride[0], p.padding[0], p.dilation[0]);
  int64_t wd = output_size(op, x_name, x, 3, w[3], p.stride[1], p.padding[1], p.dilation[1]);
  return Shape{x[0], w[0], h, wd};
}

Shape pool_output_shape(std::string_view op, const Pool2dParams& p, const Shape& x, std::string_view x_name) {
  check_pair(op, "kernel", p.kernel, 1);
  check_pair(op, "stride", p.stride, 1);
  check_pair(op, "padding", p.padding, 0);
  TANDEM_CHECK(2 * p.padding[0] <= p.kernel[0] && 2 * p.padding[1] <= p.kernel[1], ErrorCode::kInvalidArgument,
               "{}: padding ({}, {}) must be at most half the kernel ({}, {}), as in PyTorch", op, p.padding[0],
               p.padding[1], p.kernel[0], p.kernel[1]);
  int64_t h = output_size(op, x_name, x, 2, p.kernel[0], p.stride[0], p.padding[0], 1);
  int64_t w = output_size(op, x_name, x, 3, p.kernel[1], p.stride[1], p.padding[1], 1);
  return Shape{x[0], x[1], h, w};
}

const KernelTable& table(const Ctx& ctx) { return kernels_for(ctx.device().type); }

DType operand_dtype(const Ctx& ctx, const Tensor& t) {
  const bool bf16 = t.defined() && t.dtype() == DType::kBF16 && ctx.options().precision == Precision::kBf16 &&
                    table(ctx).to_bf16 != nullptr;
  return bf16 ? DType::kBF16 : DType::kF32;
}

bool keeps_bf16(const Ctx& ctx) {
  return ctx.options().precision == Precision::kBf16 && table(ctx).from_bf16 != nullptr &&
         table(ctx).to_bf16 != nullptr;
}

DType activation_dtype(const Ctx& ctx, const Tensor& t) {
  return t.defined() && t.dtype() == DType::kBF16 && keeps_bf16(ctx) ? DType::kBF16 : DType::kF32;
}

Tensor widened(Ctx& ctx, const Tensor& x) {
  if (x.dtype() != DType::kBF16) return x;
  Tensor y = like(ctx, x.shape(), x.format());
  table(ctx).from_bf16(ctx, x, y);
  return y;
}

void throw_unimplemented(std::string_view op, const Ctx& ctx) {
  throw_error(ErrorCode::kUnimplemented, "{} is not implemented on {}: its backend does not provide this kernel",
              op, ctx.device().str());
}

}  // namespace tandem::backend::detail
