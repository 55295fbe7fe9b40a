// DevicePrefetcher: on the CPU it hands batches over without a copy; with force_copy it runs
// the double-buffered copy path (CPU streams and events, the CPU's "pinned" staging buffers) and
// must deliver the same values, staging each batch through buffers it allocates once.
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
  EXPECT_EQ(p.stats().batches_copied, 5);
}

// Every batch goes through a staging buffer; equal sizes (and a smaller last batch) reuse the
// two slots' buffers, so the steady state allocates no pinned memory.
TEST(PipelineDevicePrefetch, StagesThroughPinnedBuffersAllocatedOnce) {
  auto compute = cpu_device_services().create_stream(0);
  DevicePrefetcher p(Dataset::range(0, 30).batch(4).make_iterator(), Device::cpu(), compute.get(),
                     DevicePrefetchOptions{true});
  std::vector<int64_t> values;
  std::vector<Tensor> batch;
  while (p.next(&batch)) {
    ASSERT_EQ(batch.size(), 1u);
    for (int64_t i = 0; i < batch[0].numel(); ++i) values.push_back(batch[0].data<int64_t>()[i]);
    EXPECT_EQ(p.stats().staging_allocations, 2);  // one per slot, from the first two batches on
  }
  ASSERT_EQ(values.size(), 30u);
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(values[static_cast<size_t>(i)], i);
  const DevicePrefetchStats& stats = p.stats();
  EXPECT_EQ(stats.batches_copied, 8);  // 7 of 4 and the last of 2
  EXPECT_EQ(stats.bytes_staged, 30 * static_cast<int64_t>(sizeof(int64_t)));
  EXPECT_EQ(stats.staging_allocations, 2);
  EXPECT_EQ(stats.staging_bytes_reserved, 2 * 4 * static_cast<int64_t>(sizeof(int64_t)));
}

Element i64_element(std::vector<int64_t> values) {
  Element e;
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kI64);
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  e.tensors.push_back(t);
  return e;
}

// A batch larger than its slot's buffer replaces that buffer (once); smaller ones fit, and the
// device tensor takes the batch's own shape every time.
TEST(PipelineDevicePrefetch, GrowsAStagingBufferOnlyWhenABatchOutgrowsIt) {
  std::vector<Element> elements;
  elements.push_back(i64_element({1, 2}));         // slot 0: 16 bytes
  elements.push_back(i64_element({3, 4}));         // slot 1: 16 bytes
  elements.push_back(i64_element({5, 6, 7, 8}));   // slot 0 grows to 32
  elements.push_back(i64_element({9}));            // slot 1 keeps 16
  elements.push_back(i64_element({10, 11, 12}));   // slot 0 keeps 32
  auto compute = cpu_device_services().create_stream(0);
  DevicePrefetcher p(Dataset::from_elements(std::move(elements)).make_iterator(), Device::cpu(), compute.get(),
                     DevicePrefetchOptions{true});
  std::vector<std::vector<int64_t>> seen;
  std::vector<Tensor> batch;
  while (p.next(&batch)) {
    seen.emplace_back(batch[0].data<int64_t>(), batch[0].data<int64_t>() + batch[0].numel());
  }
  std::vector<std::vector<int64_t>> expected{{1, 2}, {3, 4}, {5, 6, 7, 8}, {9}, {10, 11, 12}};
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(p.stats().staging_allocations, 3);
  EXPECT_EQ(p.stats().staging_bytes_reserved, 32 + 16);
}

// The copy reads the staging buffer, not the host batch: the delivered tensor never shares
// storage with what the pipeline produced, and the pipeline's batch is not kept alive.
TEST(PipelineDevicePrefetch, DeliversACopyNotTheHostBatch) {
  Element e = i64_element({7, 8, 9});
  Tensor host = e.tensors[0];
  std::vector<Element> elements{e};
  e = Element();
  auto compute = cpu_device_services().create_stream(0);
  DevicePrefetcher p(Dataset::from_elements(std::move(elements)).make_iterator(), Device::cpu(), compute.get(),
                     DevicePrefetchOptions{true});
  std::vector<Tensor> batch;
  ASSERT_TRUE(p.next(&batch));
  EXPECT_FALSE(batch[0].shares_storage_with(host));
  host.data<int64_t>()[0] = -1;  // a later write to the host batch does not reach the copy
  EXPECT_EQ(batch[0].data<int64_t>()[0], 7);
  EXPECT_EQ(p.stats().bytes_staged, 24);
}

}  // namespace
}  // namespace tandem::data
