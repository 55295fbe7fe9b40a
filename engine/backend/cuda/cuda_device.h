// The CUDA device services: raw cudaMalloc/cudaFree under the caching allocator, copies between
// host and devices, and RAII streams (non-blocking) and events (timing disabled, the cheap kind).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "engine/backend/cuda/device_guard.h"
#include "engine/core/device.h"

namespace tandem::cuda {

// How many times this process's host has waited for a GPU through these services (a stream, event
// or device synchronisation, a copy that completes before returning, a cudaFree): a steady training
// step should add none but its loss reads. Exported as tandem_cuda_host_synchronizations (plugin.cpp).
uint64_t host_synchronizations();

class CudaStream final : public Stream {
 public:
  explicit CudaStream(int device);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Device device() const override { return Device::cuda(device_); }
  void synchronize() override;
  void* native_handle() override { return stream_; }
  cudaStream_t get() const { return stream_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

class CudaEvent final : public Event {
 public:
  // timing: measures time (seconds_since); otherwise the cheapest kind, which stream waits handle best.
  explicit CudaEvent(int device, bool timing = false);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(Stream& stream) override;
  void wait(Stream& stream) override;
  void synchronize() override;
  bool query() override;
  double seconds_since(Event& earlier) override;

 private:
  int device_;
  bool timing_;
  cudaEvent_t event_ = nullptr;
};

class CudaDeviceServices final : public DeviceServices {
 public:
  // Throws Unavailable when the runtime sees no usable device (no driver, no GPU).
  CudaDeviceServices();

  DeviceType type() const override { return DeviceType::kCuda; }
  int device_count() const override { return device_count_; }
  void* raw_allocate(int device, size_t bytes) override;
  void raw_free(int device, void* ptr, size_t bytes) noexcept override;
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
            Stream* stream) override;
  std::unique_ptr<Stream> create_stream(int device) override;
  std::unique_ptr<Event> create_event(int device) override;
  std::unique_ptr<Event> create_timer_event(int device) override;
  void synchronize(int device) override;

  // Page-locked host memory (cudaMallocHost), for buffers that asynchronous copies read or fill.
  void* allocate_host_pinned(size_t bytes) override;
  void free_host_pinned(void* ptr, size_t bytes) noexcept override;
  void fill_zero(void* dst, Device device, size_t bytes, Stream* stream) override;
  void bind_thread(int device) override;

 private:
  void check_device(int device) const;
  // A copy or fill without a stream: on the thread's current stream when it is on `device`
  // (then synchronised, so the call is synchronous and ordered after the replica's kernels), else
  // null after waiting for all of the device's work.
  cudaStream_t implicit_stream(int device);
  int device_count_ = 0;
};

}  // namespace tandem::cuda
