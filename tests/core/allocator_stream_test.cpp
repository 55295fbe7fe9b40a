// The caching allocator on a device with streams, driven through fake streams and events whose
// completion the test controls: a block returns to the pool of the stream it was allocated on, and
// a block another stream used waits for that stream's event before it is handed out again.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/context.h"
#include "engine/core/tensor.h"

namespace tandem {
namespace {

class FakeStream final : public Stream {
 public:
  Device device() const override { return Device::cuda(0); }
  void synchronize() override {}
  void* native_handle() override { return nullptr; }
};

// Completes when the test says so; records which stream it was last recorded on.
struct FakeEventState {
  bool done = false;
  Stream* recorded_on = nullptr;
};

class FakeEvent final : public Event {
 public:
  explicit FakeEvent(std::shared_ptr<FakeEventState> state) : state_(std::move(state)) {}
  void record(Stream& s) override {
    state_->done = false;
    state_->recorded_on = &s;
  }
  void wait(Stream&) override {}
  void synchronize() override { state_->done = true; }
  bool query() override { return state_->done; }

 private:
  std::shared_ptr<FakeEventState> state_;
};

class FakeDevice final : public DeviceServices {
 public:
  DeviceType type() const override { return DeviceType::kCuda; }
  int device_count() const override { return 1; }
  void* raw_allocate(int, size_t bytes) override {
    ++raw_allocations;
    return cpu_device_services().raw_allocate(0, bytes);
  }
  void raw_free(int, void* ptr, size_t bytes) noexcept override { cpu_device_services().raw_free(0, ptr, bytes); }
  void copy(void*, Device, const void*, Device, size_t, Stream*) override {}
  std::unique_ptr<Stream> create_stream(int) override { return std::make_unique<FakeStream>(); }
  std::unique_ptr<Event> create_event(int) override {
    events.push_back(std::make_shared<FakeEventState>());
    return std::make_unique<FakeEvent>(events.back());
  }
  void synchronize(int) override {
    ++synchronizations;
    for (auto& e : events) e->done = true;
  }
  void* allocate_host_pinned(size_t bytes) override { return cpu_device_services().allocate_host_pinned(bytes); }
  void free_host_pinned(void* p, size_t b) noexcept override { cpu_device_services().free_host_pinned(p, b); }
  void fill_zero(void*, Device, size_t, Stream*) override {}
  void bind_thread(int) override {}

  int raw_allocations = 0;
  int synchronizations = 0;
  std::vector<std::shared_ptr<FakeEventState>> events;
};

TEST(CachingAllocatorStreams, ABlockReturnsToItsOwnStreamsPool) {
  FakeDevice device;
  CachingAllocator allocator(device, Device::cuda(0));
  FakeStream a, b;
  void* p = nullptr;
  {
    StreamScope on_a(&a);
    p = allocator.allocate(4096);
    allocator.deallocate(p, 4096);
  }
  {
    StreamScope on_b(&b);
    void* q = allocator.allocate(4096);  // b may not take a's block without a wait
    EXPECT_NE(q, p);
    allocator.deallocate(q, 4096);
  }
  StreamScope on_a(&a);
  EXPECT_EQ(allocator.allocate(4096), p);  // a takes it back at once: stream order makes that safe
  allocator.deallocate(p, 4096);
  EXPECT_EQ(device.raw_allocations, 2);
}

TEST(CachingAllocatorStreams, ABlockUsedOnAnotherStreamWaitsForItsEvent) {
  FakeDevice device;
  CachingAllocator allocator(device, Device::cuda(0));
  FakeStream compute, copy;
  StreamScope on_compute(&compute);
  void* p = allocator.allocate(1 << 20);
  allocator.record_stream(p, copy);
  allocator.deallocate(p, 1 << 20);
  EXPECT_EQ(allocator.stats().blocks_pending, 1);
  ASSERT_EQ(device.events.size(), 1u);
  EXPECT_EQ(device.events[0]->recorded_on, &copy);
  void* q = allocator.allocate(1 << 20);  // the copy stream may still be reading p
  EXPECT_NE(q, p);
  allocator.deallocate(q, 1 << 20);
  device.events[0]->done = true;  // the copy stream has passed the event
  void* r = allocator.allocate(1 << 20);
  void* s = allocator.allocate(1 << 20);
  EXPECT_TRUE((r == p) != (s == p)) << "the released block is handed out again exactly once";
  EXPECT_EQ(allocator.stats().blocks_pending, 0);
  allocator.deallocate(r, 1 << 20);
  allocator.deallocate(s, 1 << 20);
}

TEST(CachingAllocatorStreams, RecordingTheOwnStreamChangesNothing) {
  FakeDevice device;
  CachingAllocator allocator(device, Device::cuda(0));
  FakeStream compute;
  StreamScope on_compute(&compute);
  void* p = allocator.allocate(512);
  allocator.record_stream(p, compute);
  allocator.deallocate(p, 512);
  EXPECT_EQ(allocator.stats().blocks_pending, 0);
  EXPECT_EQ(allocator.allocate(512), p);
  allocator.deallocate(p, 512);
}

TEST(CachingAllocatorStreams, ARetiredStreamsBlocksServeAllocationsWithoutAStream) {
  FakeDevice device;
  CachingAllocator allocator(device, Device::cuda(0));
  auto stream = std::make_unique<FakeStream>();
  void* p = nullptr;
  {
    StreamScope on(stream.get());
    p = allocator.allocate(2048);
    allocator.deallocate(p, 2048);
  }
  allocator.retire_stream(*stream);
  stream.reset();
  EXPECT_EQ(allocator.allocate(2048), p);  // no current stream: the retired stream's block
  allocator.deallocate(p, 2048);
}

TEST(CachingAllocatorStreams, EmptyCacheWaitsForTheDeviceFirst) {
  FakeDevice device;
  CachingAllocator allocator(device, Device::cuda(0));
  FakeStream compute, copy;
  StreamScope on_compute(&compute);
  void* p = allocator.allocate(1000);
  allocator.record_stream(p, copy);
  allocator.deallocate(p, 1000);
  allocator.empty_cache();
  EXPECT_EQ(device.synchronizations, 1);
  EXPECT_EQ(allocator.stats().blocks_pending, 0);
  EXPECT_EQ(allocator.stats().bytes_cached, 0);
  EXPECT_EQ(allocator.stats().system_frees, 1);
}

}  // namespace
}  // namespace tandem
