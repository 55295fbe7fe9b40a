// What a CUDA kernel needs from its ExecutionContext: the replica's device and stream, its cuDNN and
// cuBLAS(Lt) handles bound to that stream, one library workspace, and per-context caches (cuDNN
// algorithms, descriptors). Created on the first kernel call of a context and destroyed with it.
// Everything here is used by the context's own thread only, so nothing is locked.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <memory>
#include <typeindex>
#include <unordered_map>

#include "engine/core/context.h"

namespace tandem::cuda {

class CudaContext final : public ContextExtension {
 public:
  explicit CudaContext(ExecutionContext& ctx);
  ~CudaContext() override;
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  const KernelOptions& options() const { return ctx_.options(); }
  ExecutionContext& context() { return ctx_; }

  cudnnHandle_t cudnn();          // created on first use, its stream set to stream()
  cublasHandle_t cublas();        // created on first use, its stream and workspace set
  cublasLtHandle_t cublas_lt();   // created on first use

  // A device buffer of at least `bytes` from the caching allocator, valid until a later call asks
  // for more. Every user runs on stream(), so reusing it across kernels is ordered by the stream.
  void* workspace(size_t bytes);
  size_t workspace_bytes() const { return workspace_bytes_; }

  // Per-context state of one kind of kernel (an algorithm cache, say), created on first use.
  template <typename T>
  T& state() {
    auto& slot = states_[std::type_index(typeid(T))];
    if (!slot) slot = std::shared_ptr<void>(new T(), [](void* p) { delete static_cast<T*>(p); });
    return *static_cast<T*>(slot.get());
  }

 private:
  ExecutionContext& ctx_;
  int device_;
  cudaStream_t stream_;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* cublas_workspace_ = nullptr;  // cuBLAS keeps its own: it may run beside a cuDNN call's
  std::unordered_map<std::type_index, std::shared_ptr<void>> states_;
};

// The CudaContext of ctx (which must be on a CUDA device), creating it on first use; makes the
// context's device current on the calling thread when it is not already.
CudaContext& cuda_context(ExecutionContext& ctx);

// The launch geometry our elementwise kernels use: 256 threads, enough blocks to cover n with a
// grid-stride loop, capped so huge tensors do not ask for absurd grids.
struct Launch {
  unsigned blocks;
  unsigned threads;
};
Launch launch_for(int64_t n);

}  // namespace tandem::cuda
