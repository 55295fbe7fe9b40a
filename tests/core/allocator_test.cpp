// The caching allocator: reuse after warm-up, size classes, and counting.
#include "engine/core/allocator.h"

#include <gtest/gtest.h>

#include "engine/core/tensor.h"

namespace tandem {
namespace {

TEST(CachingAllocator, SizeClassesWasteAtMostAQuarter) {
  for (size_t bytes : {1ul, 255ul, 256ul, 257ul, 1000ul, 4096ul, 5000ul, 1ul << 20, (1ul << 20) + 1, 123456789ul}) {
    size_t c = CachingAllocator::size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(c, std::max<size_t>(256, bytes + bytes / 4 + 1)) << bytes;
  }
}

TEST(CachingAllocator, ReusesFreedBlocksWithoutSystemAllocation) {
  CachingAllocator allocator(cpu_device_services(), Device::cpu());
  void* a = allocator.allocate(10000);
  allocator.deallocate(a, 10000);
  void* b = allocator.allocate(9990);  // same size class
  EXPECT_EQ(a, b);
  allocator.deallocate(b, 9990);
  AllocatorStats s = allocator.stats();
  EXPECT_EQ(s.system_allocations, 1);
  EXPECT_EQ(s.allocations, 2);
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_GT(s.bytes_cached, 0);
  allocator.empty_cache();
  EXPECT_EQ(allocator.stats().bytes_cached, 0);
  EXPECT_EQ(allocator.stats().system_frees, 1);
}

TEST(CachingAllocator, RepeatedTensorLoopMakesNoSystemAllocationAfterWarmup) {
  CachingAllocator& allocator = allocator_for(Device::cpu());
  auto step = [] {
    Tensor a = Tensor::empty({64, 3, 32, 32});
    Tensor b = Tensor::empty({64, 16, 32, 32});
    Tensor c = Tensor::empty({17});
    (void)a, (void)b, (void)c;
  };
  step();
  int64_t before = allocator.stats().system_allocations;
  for (int i = 0; i < 10; ++i) step();
  EXPECT_EQ(allocator.stats().system_allocations, before);
}

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("cpu").str(), "cpu");
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  EXPECT_THROW(Device::parse("gpu"), Error);
  EXPECT_THROW(Device::parse("cuda:-1"), Error);
}

}  // namespace
}  // namespace tandem
