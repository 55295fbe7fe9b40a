// Sizes past what a count or a machine holds: Shape::numel refuses a product past int64, and
// Tensor::empty refuses a byte count no machine has before asking the allocator for it.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "engine/core/allocator.h"
#include "engine/core/error.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"

namespace tandem {
namespace {

bool contains(const Error& e, std::string_view part) { return std::string(e.what()).find(part) != std::string::npos; }

TEST(ShapeOverflow, NumelPastInt64IsAnErrorNotAWrappedCount) {
  // 2^62 * 8 = 2^65 once wrapped to 0: a "tensor" of no elements that kernels then indexed.
  const Shape s({int64_t{1} << 62, 8});
  try {
    const int64_t n = s.numel();
    FAIL() << "numel() returned " << n;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(contains(e, "more elements than a 64-bit count holds")) << e.what();
    EXPECT_TRUE(contains(e, s.str())) << e.what();
  }
  // Products that wrapped to a plausible count: (2^32 + 1) * 2^32 to 2^32, 2^32 * 2^32 to 0.
  EXPECT_THROW(Shape({(int64_t{1} << 32) + 1, int64_t{1} << 32}).numel(), Error);
  EXPECT_THROW(Shape({int64_t{1} << 32, int64_t{1} << 32}).numel(), Error);
  EXPECT_THROW(Shape({2, 2, int64_t{1} << 61}).numel(), Error);
}

TEST(ShapeOverflow, LargeShapesUnderTheLimitCountExactly) {
  EXPECT_EQ(Shape({int64_t{1} << 31, int64_t{1} << 31}).numel(), int64_t{1} << 62);
  EXPECT_EQ(Shape({int64_t{1} << 62, 1}).numel(), int64_t{1} << 62);
  EXPECT_EQ(Shape({3, 5, 0, int64_t{1} << 62}).numel(), 0);  // a zero anywhere makes an empty shape
}

TEST(ShapeOverflow, ATensorPastAnyMachinesMemoryIsRefusedBeforeAllocating) {
  CachingAllocator& allocator = allocator_for(Device::cpu());
  const int64_t allocations = allocator.stats().allocations;
  try {
    Tensor t = Tensor::empty({int64_t{1} << 55, 4});  // 2^57 floats: 512 PiB
    FAIL() << "made " << t.describe();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_TRUE(contains(e, "more memory than any machine has")) << e.what();
  }
  EXPECT_EQ(allocator.stats().allocations, allocations) << "the allocator was asked for it";
}

TEST(ShapeOverflow, AByteCountThatWouldWrapSizeTIsRefused) {
  // 2^62 floats fit an int64 count, but their 2^64 bytes wrapped size_t to 0: a tensor of 2^62
  // elements over an empty allocation.
  try {
    Tensor t = Tensor::empty({int64_t{1} << 31, int64_t{1} << 31}, DType::kF32);
    FAIL() << "made " << t.describe() << " of " << t.nbytes() << " bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
  }
  try {
    Tensor t = Tensor::zeros({int64_t{1} << 60, 2}, DType::kI64);  // 2^61 elements of 8 bytes
    FAIL() << "made " << t.describe() << " of " << t.nbytes() << " bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
  }
  // A small tensor of a wide type is still fine.
  EXPECT_EQ(Tensor::empty({1024, 1024}, DType::kI64).nbytes(), size_t{8} << 20);
}

}  // namespace
}  // namespace tandem
