// The factories of factories.h: argument checks, then the device's arange_fill or random_fill.
#include <cmath>
#include <limits>

#include "engine/backend/factories.h"
#include "engine/backend/ops_validate.h"

namespace tandem::backend {
namespace {

using detail::entry;
using detail::table;

bool whole(double v) { return std::isfinite(v) && v == std::floor(v); }

// 2^63 as a double: the first value past int64's range.
constexpr double kInt64End = 9223372036854775808.0;

bool fits_int64(double v) { return whole(v) && v >= -kInt64End && v < kInt64End; }

// The length of an i64 arange of whole start and step, torch's ceil((end - start) / step) in integer
// arithmetic (a double loses integers past 2^53), after checking that its last value fits int64, so
// that the kernels' start + i step cannot overflow.
int64_t i64_count(double start, double end, double step) {
  TANDEM_CHECK(std::abs(end) < kInt64End, ErrorCode::kInvalidArgument,
               "arange: end {} lies outside int64's range; pass dtype f32", end);
  const auto s = static_cast<int64_t>(start), d = static_cast<int64_t>(step);
  // The first integer the range must not reach: ceil(end) going up, floor(end) going down.
  const auto e = static_cast<int64_t>(d > 0 ? std::ceil(end) : std::floor(end));
  int64_t span = 0, last = 0;
  TANDEM_CHECK(!__builtin_sub_overflow(e, s, &span) && span != std::numeric_limits<int64_t>::min(),
               ErrorCode::kResourceExhausted, "arange: [{}, {}) in steps of {} has more values than a tensor can hold",
               start, end, step);
  const int64_t count = span / d + (span % d != 0 ? 1 : 0);  // span and d have one sign (or span is 0)
  const bool fits =
      count == 0 || (!__builtin_mul_overflow(count - 1, d, &last) && !__builtin_add_overflow(s, last, &last));
  TANDEM_CHECK(fits, ErrorCode::kInvalidArgument,
               "arange: the last value of [{}, {}) in steps of {} lies outside int64's range", start, end, step);
  return count;
}

void check_dtype(std::string_view op, DType dtype) {
  TANDEM_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kI64, ErrorCode::kInvalidArgument,
               "{}: dtype {} is not one it makes: use f32, bf16 or i64", op, dtype_name(dtype));
}

Tensor filled(ExecutionContext& ctx, std::string_view op, const Shape& shape, double start, double step,
              DType dtype) {
  check_dtype(op, dtype);
  TANDEM_CHECK(dtype != DType::kI64 || (fits_int64(start) && fits_int64(step)), ErrorCode::kInvalidArgument,
               "{}: {} (step {}) is not a whole number within int64's range, so an i64 tensor cannot hold it: "
               "pass dtype f32",
               op, start, step);
  TANDEM_CHECK(dtype == DType::kI64 || (std::isfinite(start) || step == 0.0), ErrorCode::kInvalidArgument,
               "{}: start {} must be finite when a step follows it", op, start);
  Tensor y = Tensor::empty(shape, dtype, ctx.device());
  if (y.numel() > 0) entry(table(ctx).arange_fill, op, ctx)(ctx, start, step, y);
  return y;
}

Tensor random(ExecutionContext& ctx, std::string_view op, const Shape& shape, bool normal) {
  Tensor y = Tensor::empty(shape, DType::kF32, ctx.device());
  RandomFillParams p;
  p.seed = ctx.generator().next_u64();
  p.normal = normal;
  p.a = 0.0f;
  p.b = 1.0f;
  if (y.numel() > 0) entry(table(ctx).random_fill, op, ctx)(ctx, p, y);
  return y;
}

}  // namespace

Tensor zeros(ExecutionContext& ctx, const Shape& shape, DType dtype) { return filled(ctx, "zeros", shape, 0.0, 0.0, dtype); }

Tensor ones(ExecutionContext& ctx, const Shape& shape, DType dtype) { return filled(ctx, "ones", shape, 1.0, 0.0, dtype); }

Tensor full(ExecutionContext& ctx, const Shape& shape, double value, DType dtype) {
  return filled(ctx, "full", shape, value, 0.0, dtype);
}

Tensor arange(ExecutionContext& ctx, double start, double end, double step, std::optional<DType> dtype) {
  TANDEM_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), ErrorCode::kInvalidArgument,
               "arange: start {}, end {} and step {} must be finite", start, end, step);
  TANDEM_CHECK(step != 0.0, ErrorCode::kInvalidArgument, "arange: step must be nonzero");
  // As PyTorch: the bounds must not run against the step.
  TANDEM_CHECK((step > 0.0 && end >= start) || (step < 0.0 && end <= start), ErrorCode::kInvalidArgument,
               "arange: upper bound and larger bound inconsistent with step sign (start {}, end {}, step {})", start,
               end, step);
  const double count = std::ceil((end - start) / step);
  TANDEM_CHECK(count < static_cast<double>(int64_t{1} << 56), ErrorCode::kResourceExhausted,
               "arange: [{}, {}) in steps of {} has {} values, more than a tensor can hold", start, end, step, count);
  const DType type = dtype ? *dtype : (whole(start) && whole(end) && whole(step) ? DType::kI64 : DType::kF32);
  // A fractional start or step cannot make i64 values: filled() refuses them, naming the value.
  const bool exact = type == DType::kI64 && fits_int64(start) && fits_int64(step);
  const int64_t n = exact ? i64_count(start, end, step) : static_cast<int64_t>(count);
  return filled(ctx, "arange", Shape{n}, start, step, type);
}

Tensor arange(ExecutionContext& ctx, double end, std::optional<DType> dtype) { return arange(ctx, 0.0, end, 1.0, dtype); }

Tensor rand(ExecutionContext& ctx, const Shape& shape) { return random(ctx, "rand", shape, false); }

Tensor randn(ExecutionContext& ctx, const Shape& shape) { return random(ctx, "randn", shape, true); }

}  // namespace tandem::backend
