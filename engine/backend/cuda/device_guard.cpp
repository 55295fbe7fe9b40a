#include "engine/backend/cuda/device_guard.h"

#include <cuda_runtime_api.h>

#include "engine/backend/cuda/cuda_check.h"

namespace tandem::cuda {

DeviceGuard::DeviceGuard(int device) {
  TANDEM_CUDA_CHECK(cudaGetDevice(&previous_), "switching to cuda:{}", device);
  if (previous_ != device) TANDEM_CUDA_CHECK(cudaSetDevice(device), "device=cuda:{}", device);
  ok_ = true;
}

DeviceGuard::DeviceGuard(int device, NoThrow) noexcept {
  if (!TANDEM_CUDA_CHECK_NOTHROW(cudaGetDevice(&previous_))) {
    previous_ = -1;  // nothing to restore
    return;
  }
  ok_ = previous_ == device || TANDEM_CUDA_CHECK_NOTHROW(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  if (previous_ < 0) return;
  int current = -1;
  if (TANDEM_CUDA_CHECK_NOTHROW(cudaGetDevice(&current)) && current != previous_) {
    TANDEM_CUDA_CHECK_NOTHROW(cudaSetDevice(previous_));
  }
}

}  // namespace tandem::cuda
