// DevicePrefetcher: hands one replica its batches on its device. On the CPU the host batch is
// handed over as is (no copy). Elsewhere each batch is copied on the prefetcher's own stream
// into one of two device buffers, so the copy of batch n+1 overlaps the compute of batch n.
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

class DevicePrefetcher {
 public:
  // batches: the replica's host pipeline (ending in batch and prefetch); compute: the stream the
  // replica computes on. Pinned staging buffers come with the CUDA backend: until then host
  // batches are pageable memory, and a copy from them overlaps less on a GPU.
  DevicePrefetcher(DatasetIterator batches, Device device, Stream* compute, DevicePrefetchOptions options = {});
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  // The next batch's tensors, ready for work queued on the compute stream; false at the end.
  // They stay valid until the call after next (two buffers alternate).
  bool next(std::vector<Tensor>* batch);

  bool copies() const { return copy_stream_ != nullptr; }
  Device device() const { return device_; }

 private:
  struct Slot {
    Element host;                  // kept alive until its copy is known to be done
    std::vector<Tensor> device;    // reused while shapes stay the same
    std::unique_ptr<Event> copied;    // recorded on the copy stream after the copy
    std::unique_ptr<Event> released;  // recorded on the compute stream when the batch is done with
    bool has_batch = false;
    bool handed_out = false;
  };

  void launch(Slot& slot);  // pulls the next host batch and starts its copy

  DatasetIterator batches_;
  Device device_;
  Stream* compute_;
  std::unique_ptr<Stream> copy_stream_;  // null when batches are handed over without a copy
  Slot slots_[2];
  int current_ = 0;
};

}  // namespace tandem::data
