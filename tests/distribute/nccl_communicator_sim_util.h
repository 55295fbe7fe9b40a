// Simulated device collectives, so the NCCL communicator's own logic (event ring, `after` ordering,
// watchdog, abort, mismatch, asynchronous errors) runs on any machine. Streams count queued and
// finished work; a collective finishes, as an NCCL kernel does, only once every rank has queued
// its part and the work each part follows is done. Data moves on the host, sums in rank order.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backend/plugin_abi.h"
#include "engine/core/device.h"

namespace tandem::testing {

class SimCollectives;

class SimStream final : public Stream {
 public:
  explicit SimStream(SimCollectives* owner = nullptr) : owner_(owner) {}
  Device device() const override { return Device::cpu(); }
  void synchronize() override {}
  void* native_handle() override { return nullptr; }

  // Work on a stream of one's own (a replica's compute stream): queue() one item, finish() it later.
  uint64_t queue() { return ++queued_; }
  void finish_all() { finished_.store(queued_.load()); }
  uint64_t queued() const { return queued_.load(); }
  uint64_t finished() const { return finished_.load(); }
  void progress();  // lets the owning collectives finish what they can

 private:
  friend class SimCollectives;
  friend class SimEvent;
  SimCollectives* owner_;
  std::atomic<uint64_t> queued_{0}, finished_{0};
  // The next item queued on this stream waits for `wait_for_` to have finished `wait_until_`.
  SimStream* wait_for_ = nullptr;
  uint64_t wait_until_ = 0;
};

class SimEvent final : public Event {
 public:
  void record(Stream& stream) override;
  void wait(Stream& stream) override;
  void synchronize() override {}
  bool query() override;

 private:
  SimStream* stream_ = nullptr;
  uint64_t target_ = 0;
};

// Events of SimEvent; memory from the CPU.
class SimServices final : public DeviceServices {
 public:
  DeviceType type() const override { return DeviceType::kCpu; }
  int device_count() const override { return 1; }
  void* raw_allocate(int device, size_t bytes) override { return cpu_device_services().raw_allocate(device, bytes); }
  void raw_free(int device, void* ptr, size_t bytes) noexcept override {
    cpu_device_services().raw_free(device, ptr, bytes);
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, Stream* stream) override {
    cpu_device_services().copy(dst, dst_device, src, src_device, bytes, stream);
  }
  std::unique_ptr<Stream> create_stream(int) override { return std::make_unique<SimStream>(); }
  std::unique_ptr<Event> create_event(int) override { return std::make_unique<SimEvent>(); }
  void synchronize(int) override {}
  void* allocate_host_pinned(size_t bytes) override { return cpu_device_services().allocate_host_pinned(bytes); }
  void free_host_pinned(void* ptr, size_t bytes) noexcept override {
    cpu_device_services().free_host_pinned(ptr, bytes);
  }
  void fill_zero(void* dst, Device device, size_t bytes, Stream* stream) override {
    cpu_device_services().fill_zero(dst, device, bytes, stream);
  }
  void bind_thread(int) override {}
};

class SimCollectives final : public backend::DeviceCollectives {
 public:
  explicit SimCollectives(int world_size);

  int world_size() const override { return static_cast<int>(streams_.size()); }
  int device(int) const override { return 0; }
  Stream& stream(int rank) override { return *streams_[static_cast<size_t>(rank)]; }
  // bf16 as NCCL's ring sums it: each partial sum taken in f32 and rounded to bf16.
  void all_reduce(int rank, void* data, size_t count, DType dtype, bool average) override;
  void broadcast(int rank, void* data, size_t bytes, int root) override;
  void all_gather(int rank, const void* in, void* out, size_t bytes_per_rank) override;
  std::string async_error(int rank) override;
  void abort() noexcept override;

  // Test controls: a device that stops finishing work; NCCL's asynchronous error for a rank.
  void hold(bool on);
  void set_async_error(int rank, std::string text);
  bool aborted() const { return aborted_.load(); }
  int launches(int rank) const;  // collectives this rank has queued

  void progress();  // finishes every collective whose parts are all queued and unblocked

 private:
  enum class Kind { kAllReduce, kBroadcast, kAllGather };
  struct Part {
    Kind kind;
    void* data;
    void* out;
    size_t bytes;
    bool average;
    int root;
    SimStream* wait_for;
    uint64_t wait_until;
    DType dtype = DType::kF32;  // an all-reduce's elements
  };
  void queue(int rank, Part part);
  void run(const std::vector<Part>& parts);
  static void reduce_bf16(const std::vector<Part>& parts);

  std::vector<std::unique_ptr<SimStream>> streams_;
  mutable std::mutex mutex_;
  std::vector<std::deque<Part>> pending_;
  std::vector<int> launches_;
  std::vector<std::string> async_errors_;
  bool hold_ = false;
  std::atomic<bool> aborted_{false};
};

}  // namespace tandem::testing
