// Element types of tensors, their sizes and names, and the mapping from C++ types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kU8 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...
DType parse_dtype(std::string_view name);  // throws InvalidArgument for an unknown name

// 16-bit float storage types; arithmetic happens after conversion to float.
struct BFloat16 {
  uint16_t bits;
};
struct Half {
  uint16_t bits;
};

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };

float bf16_to_float(BFloat16 x);
BFloat16 float_to_bf16(float x);  // round to nearest even
float half_to_float(Half x);
Half float_to_half(float x);  // round to nearest even

}  // namespace tandem
