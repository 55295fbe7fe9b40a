// Tensors: creation, shapes, formats, copies and the errors of misuse.
#include "engine/core/tensor.h"

#include <gtest/gtest.h>

#include "engine/core/allocator.h"

namespace tandem {
namespace {

TEST(Tensor, EmptyHasShapeDtypeDeviceAndBytes) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::kBF16);
  EXPECT_EQ(t.shape(), Shape({2, 3, 4}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.dtype(), DType::kBF16);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.describe(), "bf16[2, 3, 4] cpu");
}

TEST(Tensor, CopiesShareStorageUntilCloned) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  Tensor b = a;
  Tensor c = a.clone();
  a.data<float>()[0] = 9;
  EXPECT_EQ(b.data<float>()[0], 9);
  EXPECT_EQ(c.data<float>()[0], 1);
  EXPECT_TRUE(a.shares_storage_with(b));
  EXPECT_FALSE(a.shares_storage_with(c));
}

TEST(Tensor, ReshapeKeepsElementsAndRejectsWrongCount) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = a.reshape({3, 2});
  EXPECT_EQ(b.to_vector(), a.to_vector());
  try {
    a.reshape({4, 2});
    FAIL() << "reshape to a wrong count must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 2]"), std::string::npos) << e.what();
  }
}

TEST(Tensor, ChannelsLastRoundTripKeepsLogicalValues) {
  std::vector<float> values(2 * 3 * 4 * 5);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  Tensor a = Tensor::from_vector(values, {2, 3, 4, 5});
  Tensor nhwc = a.to_format(MemoryFormat::kChannelsLast);
  EXPECT_EQ(nhwc.format(), MemoryFormat::kChannelsLast);
  // Element (n=0, c=1, h=0, w=0) lies at physical index 1 in NHWC.
  EXPECT_EQ(nhwc.data<float>()[1], values[20]);
  EXPECT_EQ(nhwc.to_vector(), values);
  EXPECT_THROW(Tensor::empty({2, 3}, DType::kF32, Device::cpu(), MemoryFormat::kChannelsLast), Error);
}

TEST(Tensor, ViewReinterpretsNhwcBytesAsChannelsLast) {
  // A loader's contiguous (N, H, W, C) batch is the channels_last layout of logical (N, C, H, W).
  std::vector<float> nhwc(2 * 4 * 5 * 3);
  for (size_t i = 0; i < nhwc.size(); ++i) nhwc[i] = static_cast<float>(i);
  Tensor batch = Tensor::from_vector(nhwc, {2, 4, 5, 3});
  Tensor x = batch.view({2, 3, 4, 5}, MemoryFormat::kChannelsLast);
  EXPECT_TRUE(x.shares_storage_with(batch));
  std::vector<float> logical = x.to_vector();
  // Logical (n=0, c=1, h=0, w=2) is NHWC element (0, 0, 2, 1) = 2 * 3 + 1.
  EXPECT_EQ(logical[static_cast<size_t>(1 * 20 + 0 * 5 + 2)], 7.0f);
  EXPECT_THROW(batch.view({2, 3, 4, 4}, MemoryFormat::kChannelsLast), Error);
}

TEST(Tensor, WrongDtypeAccessIsAnError) {
  Tensor t = Tensor::zeros({3}, DType::kI64);
  EXPECT_EQ(t.data<int64_t>()[2], 0);
  EXPECT_THROW(t.data<float>(), Error);
}

TEST(Tensor, CudaWithoutPluginSaysWhy) {
  try {
    Tensor::empty({2}, DType::kF32, Device::cuda(0));
    FAIL() << "a CUDA tensor without CUDA services must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("trainer doctor"), std::string::npos) << e.what();
  }
}

TEST(Dtype, Bf16AndHalfRoundTrip) {
  for (float x : {0.0f, 1.0f, -2.5f, 3.140625f, 65504.0f, 1e-6f}) {
    EXPECT_EQ(bf16_to_float(float_to_bf16(x)), bf16_to_float(float_to_bf16(bf16_to_float(float_to_bf16(x)))));
    EXPECT_NEAR(half_to_float(float_to_half(x)), x, std::abs(x) * 1e-3f + 6e-8f) << x;
  }
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(half_to_float(float_to_half(-2.5f)), -2.5f);
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  EXPECT_THROW(parse_dtype("f64"), Error);
}

}  // namespace
}  // namespace tandem
