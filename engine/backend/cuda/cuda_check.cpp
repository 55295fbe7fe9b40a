// CUDA error to tandem::Error: the call text, its values, and cudaGetErrorName/String.
#include "engine/backend/cuda/cuda_check.h"

#include <spdlog/spdlog.h>

#include "engine/core/error.h"

namespace tandem::cuda {
namespace {

ErrorCode code_for(cudaError_t status) {
  switch (status) {
    case cudaErrorMemoryAllocation: return ErrorCode::kResourceExhausted;
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable: return ErrorCode::kUnavailable;
    default: return ErrorCode::kInternal;
  }
}

}  // namespace

void throw_cuda_error(cudaError_t status, std::string_view call, const std::string& values) {
  // Clears a non-sticky error so the next unrelated call does not report it again.
  (void)cudaGetLastError();
  std::string hint;
  if (status == cudaErrorInsufficientDriver) {
    hint = " (cudart says this too when no NVIDIA driver is installed at all)";
  }
  throw Error(code_for(status), fmt::format("{} failed: {} ({}): {}{}{}", call, cudaGetErrorName(status),
                                            static_cast<int>(status), cudaGetErrorString(status),
                                            values.empty() ? "" : "; " + values, hint));
}

void throw_cudnn_error(cudnnStatus_t status, std::string_view call, const std::string& values) {
  ErrorCode code = status == CUDNN_STATUS_ALLOC_FAILED ? ErrorCode::kResourceExhausted
                   : status == CUDNN_STATUS_NOT_SUPPORTED ? ErrorCode::kUnimplemented
                                                          : ErrorCode::kInternal;
  throw Error(code, fmt::format("{} failed: {} ({}){}", call, cudnnGetErrorString(status), static_cast<int>(status),
                                values.empty() ? "" : "; " + values));
}

void throw_cublas_error(cublasStatus_t status, std::string_view call, const std::string& values) {
  ErrorCode code = status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::kResourceExhausted
                   : status == CUBLAS_STATUS_NOT_SUPPORTED ? ErrorCode::kUnimplemented
                                                           : ErrorCode::kInternal;
  throw Error(code, fmt::format("{} failed: {} ({}): {}{}", call, cublasGetStatusName(status), static_cast<int>(status),
                                cublasGetStatusString(status), values.empty() ? "" : "; " + values));
}

bool check_cuda_nothrow(cudaError_t status, std::string_view call) noexcept {
  if (status == cudaSuccess) return true;
  (void)cudaGetLastError();
  try {
    spdlog::warn("{} failed: {} ({}): {}", call, cudaGetErrorName(status), static_cast<int>(status),
                 cudaGetErrorString(status));
  } catch (...) {
    // Logging itself failed; nothing more a destructor can do.
  }
  return false;
}

}  // namespace tandem::cuda
