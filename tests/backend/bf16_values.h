// Reading bf16 tensors in tests of bf16 activations: their widened values, and whether they hold an
// f32 result rounded to nearest even, bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "engine/core/tensor.h"

namespace tandem::backend::testing {

// t's bf16 values widened into an f32 tensor of its shape and format (on the CPU).
inline Tensor widened(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::kF32, Device::cpu(), t.format());
  const auto* bits = static_cast<const uint16_t*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<float>()[i] = bf16_to_float(BFloat16{bits[i]});
  return out;
}

// Whether bf16 tensor got holds exactly the f32 tensor want's values rounded to nearest even.
inline void expect_rounding_of(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), DType::kBF16) << what;
  ASSERT_EQ(want.dtype(), DType::kF32) << what;
  ASSERT_EQ(got.format(), want.format()) << what;
  const auto* bits = static_cast<const uint16_t*>(got.raw_data());
  int64_t wrong = 0;
  for (int64_t i = 0; i < got.numel(); ++i) wrong += bits[i] != float_to_bf16(want.data<float>()[i]).bits;
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << got.numel() << " values are not the f32 result rounded";
}

}  // namespace tandem::backend::testing
