// DevicePrefetcher: on the CPU it hands batches over without a copy; with force_copy it runs
// the double-buffered copy path (CPU streams and events) and must deliver the same values.
#include <gtest/gtest.h>

#include "data/pipeline/device_prefetcher.h"

namespace tandem::data {
namespace {

std::vector<int64_t> drain(DevicePrefetcher& p, std::vector<Tensor>* kept) {
  std::vector<int64_t> values;
  std::vector<Tensor> batch;
  while (p.next(&batch)) {
    EXPECT_EQ(batch.size(), 1u);
    kept->push_back(batch[0]);
    for (int64_t i = 0; i < batch[0].numel(); ++i) values.push_back(batch[0].data<int64_t>()[i]);
  }
  return values;
}

TEST(PipelineDevicePrefetch, CpuHandsOverWithoutCopy) {
  DevicePrefetcher p(Dataset::range(0, 10).batch(4).prefetch(2).make_iterator(), Device::cpu(), nullptr);
  EXPECT_FALSE(p.copies());
  std::vector<Tensor> kept;
  std::vector<int64_t> values = drain(p, &kept);
  EXPECT_EQ(values.size(), 10u);
  EXPECT_EQ(values[9], 9);
  EXPECT_FALSE(kept[0].shares_storage_with(kept[1]));  // each batch is the host batch itself
}

TEST(PipelineDevicePrefetch, CopyPathIsDoubleBuffered) {
  auto compute = cpu_device_services().create_stream(0);
  DevicePrefetcher p(Dataset::range(0, 20).batch(4).prefetch(2).make_iterator(), Device::cpu(), compute.get(),
                     DevicePrefetchOptions{true});
  EXPECT_TRUE(p.copies());
  std::vector<Tensor> kept;
  std::vector<int64_t> values;
  std::vector<Tensor> batch;
  while (p.next(&batch)) {
    kept.push_back(batch[0]);
    // Read before asking for the next one: the buffer is reused two calls later.
    for (int64_t i = 0; i < batch[0].numel(); ++i) values.push_back(batch[0].data<int64_t>()[i]);
  }
  ASSERT_EQ(values.size(), 20u);
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(values[static_cast<size_t>(i)], i);
  ASSERT_EQ(kept.size(), 5u);
  EXPECT_TRUE(kept[0].shares_storage_with(kept[2]));  // two buffers alternate
  EXPECT_FALSE(kept[0].shares_storage_with(kept[1]));
  std::vector<Tensor> after;
  EXPECT_FALSE(p.next(&after));
}

}  // namespace
}  // namespace tandem::data
