// CUDA device services over the CUDA runtime; every call is checked (cuda_check.h).
#include "engine/backend/cuda/cuda_device.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/core/error.h"

namespace tandem::cuda {
namespace {

std::atomic<uint64_t> host_waits{0};

// Every place below where the host waits for the GPU goes through here.
cudaError_t counted(cudaError_t status) {
  host_waits.fetch_add(1, std::memory_order_relaxed);
  return status;
}

cudaStream_t native_stream(Stream* stream) {
  if (stream == nullptr) return nullptr;
  TANDEM_CHECK(!stream->device().is_cpu(), ErrorCode::kInvalidArgument,
               "a CUDA copy was given a CPU stream; pass a CUDA stream or none");
  return static_cast<cudaStream_t>(stream->native_handle());
}

cudaMemcpyKind copy_kind(Device dst, Device src) {
  if (src.is_cpu()) return dst.is_cpu() ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice;
  return dst.is_cpu() ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
}

}  // namespace

uint64_t host_synchronizations() { return host_waits.load(std::memory_order_relaxed); }

CudaStream::CudaStream(int device) : device_(device) {
  DeviceGuard guard(device);
  // Non-blocking: replica streams must not serialise with the legacy default stream.
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "device=cuda:{}", device);
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) TANDEM_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
}

void CudaStream::synchronize() {
  TANDEM_CUDA_CHECK(counted(cudaStreamSynchronize(stream_)), "device=cuda:{}", device_);
}

CudaEvent::CudaEvent(int device, bool timing) : device_(device), timing_(timing) {
  DeviceGuard guard(device);
  // Without timing: the cheapest event, and the kind cudaStreamWaitEvent handles best.
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming),
                    "device=cuda:{} timing={}", device, timing);
}

double CudaEvent::seconds_since(Event& earlier) {
  auto* start = dynamic_cast<CudaEvent*>(&earlier);
  TANDEM_CHECK(start != nullptr && timing_ && start->timing_, ErrorCode::kInvalidArgument,
               "seconds_since: both events must be CUDA timer events (create_timer_event)");
  float ms = 0.0f;
  TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start->event_, event_), "events on cuda:{} and cuda:{}", start->device_,
                    device_);
  return static_cast<double>(ms) / 1000.0;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) TANDEM_CUDA_CHECK_NOTHROW(cudaEventDestroy(event_));
}

void CudaEvent::record(Stream& stream) {
  TANDEM_CUDA_CHECK(cudaEventRecord(event_, native_stream(&stream)), "event on cuda:{}, stream on {}", device_,
                    stream.device().str());
}

void CudaEvent::wait(Stream& stream) {
  TANDEM_CUDA_CHECK(cudaStreamWaitEvent(native_stream(&stream), event_, 0), "event on cuda:{}, stream on {}",
                    device_, stream.device().str());
}

void CudaEvent::synchronize() { TANDEM_CUDA_CHECK(counted(cudaEventSynchronize(event_)), "event on cuda:{}", device_); }

bool CudaEvent::query() {
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  TANDEM_CUDA_CHECK(status, "event on cuda:{}", device_);
  return true;
}

CudaDeviceServices::CudaDeviceServices() {
  TANDEM_CUDA_CHECK(cudaGetDeviceCount(&device_count_), "");
  TANDEM_CHECK(device_count_ > 0, ErrorCode::kUnavailable, "the CUDA runtime sees no GPU (CUDA_VISIBLE_DEVICES={})",
               std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "<not set>");
}

void CudaDeviceServices::check_device(int device) const {
  TANDEM_CHECK(device >= 0 && device < device_count_, ErrorCode::kInvalidArgument,
               "device cuda:{} does not exist: {} CUDA device(s) visible", device, device_count_);
}

void* CudaDeviceServices::raw_allocate(int device, size_t bytes) {
  check_device(device);
  DeviceGuard guard(device);
  void* ptr = nullptr;
  TANDEM_CUDA_CHECK(cudaMalloc(&ptr, bytes), "bytes={} device=cuda:{}", bytes, device);
  return ptr;
}

void CudaDeviceServices::raw_free(int device, void* ptr, size_t) noexcept {
  if (ptr == nullptr) return;
  try {
    DeviceGuard guard(device);
    TANDEM_CUDA_CHECK_NOTHROW(counted(cudaFree(ptr)));
  } catch (const Error&) {
    TANDEM_CUDA_CHECK_NOTHROW(counted(cudaFree(ptr)));  // could not select the device; cudaFree finds it anyway
  }
}

cudaStream_t CudaDeviceServices::implicit_stream(int device) {
  Stream* bound = current_stream();
  if (bound != nullptr && bound->device() == Device::cuda(device)) {
    return static_cast<cudaStream_t>(bound->native_handle());
  }
  // No stream of this device is current on this thread: wait for everything the device has queued,
  // so the legacy-stream call below cannot race a non-blocking stream's kernels.
  TANDEM_CUDA_CHECK(counted(cudaDeviceSynchronize()), "before a copy without a stream on cuda:{}", device);
  return nullptr;
}

void CudaDeviceServices::copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                              Stream* stream) {
  if (bytes == 0) return;
  if (!dst_device.is_cpu()) check_device(dst_device.index);
  if (!src_device.is_cpu()) check_device(src_device.index);
  cudaMemcpyKind kind = copy_kind(dst_device, src_device);
  if (kind == cudaMemcpyHostToHost) {
    std::memcpy(dst, src, bytes);
    return;
  }
  int device = dst_device.is_cpu() ? src_device.index : dst_device.index;
  DeviceGuard guard(device);
  bool implicit = stream == nullptr;
  cudaStream_t native = implicit ? implicit_stream(device) : native_stream(stream);
  bool peer = !dst_device.is_cpu() && !src_device.is_cpu() && dst_device.index != src_device.index;
  if (peer) {
    if (implicit) {
      DeviceGuard src_guard(src_device.index);
      TANDEM_CUDA_CHECK(counted(cudaDeviceSynchronize()), "before a peer copy from {}", src_device.str());
    }
    TANDEM_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, native),
                      "bytes={} from {} to {}", bytes, src_device.str(), dst_device.str());
  } else {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, native), "bytes={} from {} to {}", bytes,
                      src_device.str(), dst_device.str());
  }
  // A copy between memory of the thread's own device, queued on its bound stream (a replica's), is
  // ordered with everything that stream runs before and after it: the host need not wait, and a
  // step that copies or zeroes device tensors never blocks on the GPU (DESIGN.md, "The GPU step").
  // A copy from or to the host (which reads or reuses its buffer at once), a peer copy, or one on
  // the legacy stream (no stream bound) still completes before the call returns.
  const bool ordered_on_bound_stream = native != nullptr && kind == cudaMemcpyDeviceToDevice && !peer;
  if (implicit && !ordered_on_bound_stream) {
    TANDEM_CUDA_CHECK(counted(cudaStreamSynchronize(native)), "after copying {} bytes from {} to {}", bytes,
                      src_device.str(), dst_device.str());
  }
}

void CudaDeviceServices::fill_zero(void* dst, Device device, size_t bytes, Stream* stream) {
  if (bytes == 0) return;
  TANDEM_CHECK(!device.is_cpu(), ErrorCode::kInvalidArgument, "CUDA services cannot fill host memory");
  check_device(device.index);
  DeviceGuard guard(device.index);
  bool implicit = stream == nullptr;
  cudaStream_t native = implicit ? implicit_stream(device.index) : native_stream(stream);
  TANDEM_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, native), "bytes={} on {}", bytes, device.str());
  // On the thread's bound stream the memset is ordered before the stream's later work: no wait.
  if (implicit && native == nullptr) {
    TANDEM_CUDA_CHECK(counted(cudaStreamSynchronize(native)), "after zeroing {} bytes on {}", bytes, device.str());
  }
}

void CudaDeviceServices::bind_thread(int device) {
  check_device(device);
  TANDEM_CUDA_CHECK(cudaSetDevice(device), "binding the replica thread to cuda:{}", device);
}

std::unique_ptr<Stream> CudaDeviceServices::create_stream(int device) {
  check_device(device);
  return std::make_unique<CudaStream>(device);
}

std::unique_ptr<Event> CudaDeviceServices::create_event(int device) {
  check_device(device);
  return std::make_unique<CudaEvent>(device);
}

std::unique_ptr<Event> CudaDeviceServices::create_timer_event(int device) {
  check_device(device);
  return std::make_unique<CudaEvent>(device, true);
}

void CudaDeviceServices::synchronize(int device) {
  check_device(device);
  DeviceGuard guard(device);
  TANDEM_CUDA_CHECK(counted(cudaDeviceSynchronize()), "device=cuda:{}", device);
}

void* CudaDeviceServices::allocate_host_pinned(size_t bytes) {
  void* ptr = nullptr;
  TANDEM_CUDA_CHECK(cudaMallocHost(&ptr, bytes), "bytes={}", bytes);
  return ptr;
}

void CudaDeviceServices::free_host_pinned(void* ptr, size_t) noexcept {
  if (ptr != nullptr) TANDEM_CUDA_CHECK_NOTHROW(cudaFreeHost(ptr));
}

}  // namespace tandem::cuda
