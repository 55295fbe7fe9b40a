#include "engine/core/dtype.h"

#include <bit>
#include <cmath>

#include "engine/core/error.h"

namespace tandem {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8}) {
    if (dtype_name(d) == name) return d;
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown dtype '{}': use one of f32, bf16, f16, i32, i64, u8", name);
}

float bf16_to_float(BFloat16 x) { return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16); }

BFloat16 float_to_bf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return BFloat16{static_cast<uint16_t>((u >> 16) | 0x40)};
  uint32_t rounding = 0x7fff + ((u >> 16) & 1);
  return BFloat16{static_cast<uint16_t>((u + rounding) >> 16)};
}

float half_to_float(Half x) {
  uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000) << 16;
  uint32_t exp = (x.bits >> 10) & 0x1f;
  uint32_t mant = x.bits & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) {
    // Subnormal half: value = mant * 2^-24.
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

Half float_to_half(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  if (std::isnan(x)) return Half{static_cast<uint16_t>(sign | 0x7e00)};
  float a = std::fabs(x);
  if (a >= 65520.0f) return Half{static_cast<uint16_t>(sign | 0x7c00)};
  if (a < 6.103515625e-05f) {
    // Subnormal range: quantise to multiples of 2^-24 with round to nearest even.
    float q = std::nearbyint(std::ldexp(a, 24));
    return Half{static_cast<uint16_t>(sign | static_cast<uint16_t>(q))};
  }
  uint32_t au = std::bit_cast<uint32_t>(a);
  uint32_t rounded = au + 0xfff + ((au >> 13) & 1);
  uint32_t exp = (rounded >> 23) - 112;
  uint32_t mant = (rounded >> 13) & 0x3ff;
  return Half{static_cast<uint16_t>(sign | (exp << 10) | mant)};
}

}  // namespace tandem
