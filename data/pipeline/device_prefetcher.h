// DevicePrefetcher: hands one replica its batches on its device. On the CPU the host batch is
// handed over as is (no copy). Elsewhere each batch is staged into pinned host memory and copied
// on the prefetcher's own stream into one of two device buffers, so the copy of batch n+1
// overlaps the compute of batch n.
#pragma once

#include <memory>
#include <vector>

#include "data/pipeline/dataset.h"
#include "engine/core/device.h"
#include "engine/core/tensor.h"

namespace tandem::data {

struct DevicePrefetchOptions {
  // Copy even on the CPU: runs the double-buffered path with the CPU's streams and events,
  // which is how the tests check it on machines without a GPU.
  bool force_copy = false;
};

// What the copy path has done so far; all zero when batches are handed over without a copy.
struct DevicePrefetchStats {
  int64_t batches_copied = 0;
  int64_t bytes_staged = 0;           // copied from host batches into the pinned staging buffers
  int64_t staging_allocations = 0;    // pinned buffers allocated: one per slot and tensor while sizes fit
  int64_t staging_bytes_reserved = 0; // pinned memory held now
  double copy_seconds = 0;            // host time staging batches and queueing their copies
};

class DevicePrefetcher {
 public:
  // batches: the replica's host pipeline (ending in batch and prefetch); compute: the stream the
  // replica computes on.
  DevicePrefetcher(DatasetIterator batches, Device device, Stream* compute, DevicePrefetchOptions options = {});
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  // The next batch's tensors, ready for work queued on the compute stream; false at the end.
  // They stay valid until the call after next (two buffers alternate).
  bool next(std::vector<Tensor>* batch);

  bool copies() const { return copy_stream_ != nullptr; }
  Device device() const { return device_; }
  const DevicePrefetchStats& stats() const { return stats_; }

 private:
  // Page-locked host memory from DeviceServices::allocate_host_pinned. A copy from pageable
  // memory is staged by the driver through its own small pinned buffer and blocks the host;
  // from pinned memory the copy engine reads directly and the copy overlaps compute.
  class PinnedBuffer {
   public:
    PinnedBuffer() = default;
    ~PinnedBuffer() { release(); }
    PinnedBuffer(PinnedBuffer&& other) noexcept { swap(other); }
    PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
      swap(other);
      return *this;
    }
    // Makes room for `bytes`, keeping the buffer when it already fits; true if it allocated.
    bool reserve(DeviceServices& services, size_t bytes);
    void* data() const { return data_; }
    size_t capacity() const { return capacity_; }

   private:
    void release() noexcept;
    void swap(PinnedBuffer& other) noexcept;
    DeviceServices* services_ = nullptr;
    void* data_ = nullptr;
    size_t capacity_ = 0;
  };

  struct Slot {
    std::vector<PinnedBuffer> staging;  // one per tensor of the batch, reused while sizes fit
    std::vector<Tensor> device;    // reused while shapes stay the same
    std::unique_ptr<Event> copied;    // recorded on the copy stream after the copy
    std::unique_ptr<Event> released;  // recorded on the compute stream when the batch is done with
    bool has_batch = false;
    bool handed_out = false;
  };

  void launch(Slot& slot);  // pulls the next host batch and starts its copy
  void stage(Slot& slot, const std::vector<Tensor>& host);  // host batch -> pinned buffers

  DatasetIterator batches_;
  Device device_;
  Stream* compute_;
  DeviceServices* services_ = nullptr;  // the device's, when copying
  DevicePrefetchStats stats_;
  std::unique_ptr<Stream> copy_stream_;  // null when batches are handed over without a copy
  Slot slots_[2];
  int current_ = 0;
};

}  // namespace tandem::data
