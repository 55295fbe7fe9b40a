// CUDA device services over the CUDA runtime; every call is checked (cuda_check.h).
#include "engine/backend/cuda/cuda_device.h"

#include <cstdlib>
#include <cstring>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/core/error.h"

namespace tandem::cuda {
namespace {

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

DeviceGuard::DeviceGuard(int device) {
  TANDEM_CUDA_CHECK(cudaGetDevice(&previous_), "");
  if (previous_ != device) TANDEM_CUDA_CHECK(cudaSetDevice(device), "device=cuda:{}", device);
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (TANDEM_CUDA_CHECK_NOTHROW(cudaGetDevice(&current)) && current != previous_) {
    TANDEM_CUDA_CHECK_NOTHROW(cudaSetDevice(previous_));
  }
}

CudaStream::CudaStream(int device) : device_(device) {
  DeviceGuard guard(device);
  // Non-blocking: replica streams must not serialise with the legacy default stream.
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "device=cuda:{}", device);
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) TANDEM_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
}

void CudaStream::synchronize() { TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_), "device=cuda:{}", device_); }

CudaEvent::CudaEvent(int device) : device_(device) {
  DeviceGuard guard(device);
  // Timing disabled: the cheapest event, and the kind cudaStreamWaitEvent handles best.
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "device=cuda:{}", device);
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

void CudaEvent::synchronize() { TANDEM_CUDA_CHECK(cudaEventSynchronize(event_), "event on cuda:{}", device_); }

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
    TANDEM_CUDA_CHECK_NOTHROW(cudaFree(ptr));
  } catch (const Error&) {
    TANDEM_CUDA_CHECK_NOTHROW(cudaFree(ptr));  // could not select the device; cudaFree finds it anyway
  }
}

void CudaDeviceServices::copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                              Stream* stream) {
  if (bytes == 0) return;
  if (!dst_device.is_cpu()) check_device(dst_device.index);
  if (!src_device.is_cpu()) check_device(src_device.index);
  cudaStream_t native = native_stream(stream);
  bool peer = !dst_device.is_cpu() && !src_device.is_cpu() && dst_device.index != src_device.index;
  if (peer) {
    if (stream != nullptr) {
      TANDEM_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, native),
                        "bytes={} from {} to {}", bytes, src_device.str(), dst_device.str());
    } else {
      TANDEM_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device.index, src, src_device.index, bytes),
                        "bytes={} from {} to {}", bytes, src_device.str(), dst_device.str());
    }
    return;
  }
  cudaMemcpyKind kind = copy_kind(dst_device, src_device);
  if (kind == cudaMemcpyHostToHost) {
    std::memcpy(dst, src, bytes);
    return;
  }
  DeviceGuard guard(dst_device.is_cpu() ? src_device.index : dst_device.index);
  if (stream != nullptr) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, native), "bytes={} from {} to {}", bytes,
                      src_device.str(), dst_device.str());
  } else {
    TANDEM_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind), "bytes={} from {} to {}", bytes, src_device.str(),
                      dst_device.str());
  }
}

std::unique_ptr<Stream> CudaDeviceServices::create_stream(int device) {
  check_device(device);
  return std::make_unique<CudaStream>(device);
}

std::unique_ptr<Event> CudaDeviceServices::create_event(int device) {
  check_device(device);
  return std::make_unique<CudaEvent>(device);
}

void CudaDeviceServices::synchronize(int device) {
  check_device(device);
  DeviceGuard guard(device);
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize(), "device=cuda:{}", device);
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
