// The CUDA device services through the plugin, as the engine uses them: copies both ways,
// stream ordering through events, and the caching allocator making no cudaMalloc once warm.
// Every test skips, saying why, where there is no driver or GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "tests/cuda/cuda_test_util.h"

namespace tandem {
namespace {

std::vector<float> iota_floats(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(CudaDevice, SynchronousRoundTrip) {
  TANDEM_REQUIRE_GPU();
  DeviceServices& cuda = device_services(DeviceType::kCuda);
  const size_t n = 1 << 20;
  std::vector<float> host = iota_floats(n, 1.0f), back(n, 0.0f);
  void* d = cuda.raw_allocate(0, n * sizeof(float));
  cuda.copy(d, Device::cuda(0), host.data(), Device::cpu(), n * sizeof(float), nullptr);
  cuda.copy(back.data(), Device::cpu(), d, Device::cuda(0), n * sizeof(float), nullptr);
  cuda.raw_free(0, d, n * sizeof(float));
  EXPECT_EQ(host, back);
}

TEST(CudaDevice, TensorRoundTripOnAStream) {
  TANDEM_REQUIRE_GPU();
  auto stream = device_services(DeviceType::kCuda).create_stream(0);
  Tensor x = Tensor::from_vector(iota_floats(6 * 7, -3.0f), Shape({6, 7}));
  Tensor on_gpu = x.to(Device::cuda(0), stream.get());
  Tensor back = on_gpu.to(Device::cpu(), stream.get());
  stream->synchronize();
  ASSERT_EQ(back.shape(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(back.data<float>()[i], x.data<float>()[i]) << i;
}

// Pinned host memory (DeviceServices::allocate_host_pinned), as the device prefetcher stages
// batches: an asynchronous copy from it and back on one stream round-trips exactly.
TEST(CudaDevice, PinnedHostBufferRoundTripsAsynchronously) {
  TANDEM_REQUIRE_GPU();
  DeviceServices& cuda = device_services(DeviceType::kCuda);
  const size_t n = 4 << 20, bytes = n * sizeof(float);
  auto* up = static_cast<float*>(cuda.allocate_host_pinned(bytes));
  auto* down = static_cast<float*>(cuda.allocate_host_pinned(bytes));
  ASSERT_NE(up, nullptr);
  ASSERT_NE(down, nullptr);
  std::vector<float> expected = iota_floats(n, 2.0f);
  std::copy(expected.begin(), expected.end(), up);
  std::fill(down, down + n, 0.0f);
  void* d = cuda.raw_allocate(0, bytes);
  auto stream = cuda.create_stream(0);
  cuda.copy(d, Device::cuda(0), up, Device::cpu(), bytes, stream.get());
  cuda.copy(down, Device::cpu(), d, Device::cuda(0), bytes, stream.get());  // same stream: after the upload
  stream->synchronize();
  std::vector<float> back(down, down + n);
  cuda.raw_free(0, d, bytes);
  cuda.free_host_pinned(up, bytes);
  cuda.free_host_pinned(down, bytes);
  EXPECT_EQ(back, expected);
}

TEST(CudaDevice, EventOrdersTwoStreams) {
  TANDEM_REQUIRE_GPU();
  DeviceServices& cuda = device_services(DeviceType::kCuda);
  const size_t n = 16 << 20, bytes = n * sizeof(float);  // large enough that the copy takes a while
  std::vector<float> host = iota_floats(n, 0.5f), back(n, 0.0f);
  void* a = cuda.raw_allocate(0, bytes);
  void* b = cuda.raw_allocate(0, bytes);
  auto producer = cuda.create_stream(0);
  auto consumer = cuda.create_stream(0);
  auto ready = cuda.create_event(0);
  cuda.copy(a, Device::cuda(0), host.data(), Device::cpu(), bytes, producer.get());
  ready->record(*producer);
  ready->wait(*consumer);  // without this wait the consumer could read `a` before it is filled
  cuda.copy(b, Device::cuda(0), a, Device::cuda(0), bytes, consumer.get());
  cuda.copy(back.data(), Device::cpu(), b, Device::cuda(0), bytes, consumer.get());
  consumer->synchronize();
  ready->synchronize();
  EXPECT_TRUE(ready->query());
  EXPECT_EQ(host, back);
  cuda.raw_free(0, a, bytes);
  cuda.raw_free(0, b, bytes);
}

TEST(CudaDevice, CachingAllocatorMakesNoCudaMallocOnceWarm) {
  TANDEM_REQUIRE_GPU();
  CachingAllocator& allocator = allocator_for(Device::cuda(0));
  const std::vector<size_t> step_sizes = {256, 4096, 1 << 20, 3 << 20, 64 << 20, 1000};
  auto one_step = [&] {
    std::vector<void*> blocks;
    for (size_t s : step_sizes) blocks.push_back(allocator.allocate(s));
    for (size_t i = 0; i < blocks.size(); ++i) allocator.deallocate(blocks[i], step_sizes[i]);
  };
  one_step();  // warm-up: the only system allocations
  int64_t warm = allocator.stats().system_allocations;
  for (int step = 0; step < 10; ++step) one_step();
  EXPECT_EQ(allocator.stats().system_allocations, warm);
}

TEST(CudaDevice, PeerCopyBetweenTwoGpus) {
  TANDEM_REQUIRE_GPU();
  DeviceServices& cuda = device_services(DeviceType::kCuda);
  if (cuda.device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << cuda.device_count() << " visible";
  const size_t n = 4096, bytes = n * sizeof(float);
  std::vector<float> host = iota_floats(n, 2.0f), back(n, 0.0f);
  void* d0 = cuda.raw_allocate(0, bytes);
  void* d1 = cuda.raw_allocate(1, bytes);
  cuda.copy(d0, Device::cuda(0), host.data(), Device::cpu(), bytes, nullptr);
  cuda.copy(d1, Device::cuda(1), d0, Device::cuda(0), bytes, nullptr);
  cuda.copy(back.data(), Device::cpu(), d1, Device::cuda(1), bytes, nullptr);
  EXPECT_EQ(host, back);
  cuda.raw_free(0, d0, bytes);
  cuda.raw_free(1, d1, bytes);
}

TEST(CudaDevice, BadDeviceIsAClearError) {
  TANDEM_REQUIRE_GPU();
  DeviceServices& cuda = device_services(DeviceType::kCuda);
  try {
    cuda.raw_allocate(cuda.device_count() + 7, 16);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
