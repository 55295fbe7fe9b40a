// The one check every CUDA runtime call goes through: a failure becomes a tandem::Error that
// names the call as written, the values it was given and CUDA's own words for the failure.
// Destructors use check_cuda_nothrow, which logs instead of throwing.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <string>
#include <string_view>

namespace tandem::cuda {

// Throws tandem::Error: ResourceExhausted for out-of-memory (so the caching allocator can
// empty its cache and retry), Unavailable for a missing driver or device, Internal otherwise.
[[noreturn]] void throw_cuda_error(cudaError_t status, std::string_view call, const std::string& values);

template <typename... Args>
void check_cuda(cudaError_t status, std::string_view call, fmt::format_string<Args...> values, Args&&... args) {
  if (status == cudaSuccess) [[likely]] return;
  throw_cuda_error(status, call, fmt::format(values, std::forward<Args>(args)...));
}

// For destructors and other noexcept paths: logs the failure and returns false.
bool check_cuda_nothrow(cudaError_t status, std::string_view call) noexcept;

// Errors a faulting kernel leaves (an illegal address, a trap, an assert): the context is lost and
// every later call fails with the same error, so the call that reports one is rarely at fault.
bool is_sticky_error(cudaError_t status);

// Before a fall-back that would blame `during` (dropping a cuDNN algorithm, say): probe is what the
// stream reports now (cudaStreamQuery). A sticky error there is an earlier kernel's fault, thrown
// as such (Internal, with how to find the kernel) instead of being taken for the algorithm's; any
// other error is thrown naming `during`. cudaSuccess and cudaErrorNotReady pass.
void check_no_earlier_fault(cudaError_t probe, std::string_view during);

}  // namespace tandem::cuda

// TANDEM_CUDA_CHECK(cudaMalloc(&p, n), "bytes={}", n): the macro only captures the call's text.
#define TANDEM_CUDA_CHECK(call, ...) ::tandem::cuda::check_cuda((call), #call, __VA_ARGS__)
#define TANDEM_CUDA_CHECK_NOTHROW(call) ::tandem::cuda::check_cuda_nothrow((call), #call)

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

namespace tandem::cuda {

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, std::string_view call, const std::string& values);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, std::string_view call, const std::string& values);

template <typename... Args>
void check_cudnn(cudnnStatus_t status, std::string_view call, fmt::format_string<Args...> values, Args&&... args) {
  if (status == CUDNN_STATUS_SUCCESS) [[likely]] return;
  throw_cudnn_error(status, call, fmt::format(values, std::forward<Args>(args)...));
}

template <typename... Args>
void check_cublas(cublasStatus_t status, std::string_view call, fmt::format_string<Args...> values, Args&&... args) {
  if (status == CUBLAS_STATUS_SUCCESS) [[likely]] return;
  throw_cublas_error(status, call, fmt::format(values, std::forward<Args>(args)...));
}

// After a <<<...>>> launch: a bad configuration shows up here, an error inside the kernel later.
template <typename... Args>
void check_launch(std::string_view kernel, fmt::format_string<Args...> values, Args&&... args) {
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) [[likely]] return;
  throw_cuda_error(status, kernel, fmt::format(values, std::forward<Args>(args)...));
}

}  // namespace tandem::cuda

// TANDEM_CUDNN_CHECK(cudnnConvolutionForward(...), "op=conv2d_forward x={}", x.shape().str())
#define TANDEM_CUDNN_CHECK(call, ...) ::tandem::cuda::check_cudnn((call), #call, __VA_ARGS__)
#define TANDEM_CUBLAS_CHECK(call, ...) ::tandem::cuda::check_cublas((call), #call, __VA_ARGS__)
// TANDEM_CUDA_LAUNCH_CHECK("relu_forward_kernel", "n={}", n) right after the launch.
#define TANDEM_CUDA_LAUNCH_CHECK(kernel, ...) ::tandem::cuda::check_launch(kernel, __VA_ARGS__)
