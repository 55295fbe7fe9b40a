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

constexpr std::string_view kFindTheKernel =
    "; an earlier kernel faulted and the CUDA context is lost: the call named here is only where it "
    "surfaced. Rerun with CUDA_LAUNCH_BLOCKING=1 (every launch synchronous) to name the kernel, or under "
    "compute-sanitizer";

}  // namespace

bool is_sticky_error(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

void check_no_earlier_fault(cudaError_t probe, std::string_view during) {
  if (probe == cudaSuccess || probe == cudaErrorNotReady) return;
  throw_cuda_error(probe, "cudaStreamQuery", fmt::format("the stream's state before {}", during));
}

void throw_cuda_error(cudaError_t status, std::string_view call, const std::string& values) {
  // Clears a non-sticky error so the next unrelated call does not report it again.
  (void)cudaGetLastError();
  std::string hint;
  if (status == cudaErrorInsufficientDriver) {
    hint = " (cudart says this too when no NVIDIA driver is installed at all)";
  } else if (is_sticky_error(status)) {
    hint = std::string(kFindTheKernel);
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
