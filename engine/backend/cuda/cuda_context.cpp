#include "engine/backend/cuda/cuda_context.h"

#include <algorithm>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/core/error.h"

namespace tandem::cuda {
namespace {

// cuBLAS's own recommendation for Hopper (its default pool per stream is smaller).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

}  // namespace

CudaContext::CudaContext(ExecutionContext& ctx)
    : ctx_(ctx), device_(ctx.device().index), stream_(static_cast<cudaStream_t>(ctx.stream().native_handle())) {
  TANDEM_CHECK(!ctx.device().is_cpu(), ErrorCode::kInvalidArgument, "a CUDA kernel was called with a {} context",
               ctx.device().str());
}

CudaContext::~CudaContext() {
  // The work that uses the handles and buffers must be over before they go.
  TANDEM_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream_));
  states_.clear();
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (cublas_lt_ != nullptr) cublasLtDestroy(cublas_lt_);
  if (workspace_ != nullptr) ctx_.allocator().deallocate(workspace_, workspace_bytes_);
  if (cublas_workspace_ != nullptr) ctx_.allocator().deallocate(cublas_workspace_, kCublasWorkspaceBytes);
}

cudnnHandle_t CudaContext::cudnn() {
  if (cudnn_ == nullptr) {
    TANDEM_CUDNN_CHECK(cudnnCreate(&cudnn_), "device=cuda:{}", device_);
    TANDEM_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_), "device=cuda:{}", device_);
  }
  return cudnn_;
}

cublasHandle_t CudaContext::cublas() {
  if (cublas_ == nullptr) {
    TANDEM_CUBLAS_CHECK(cublasCreate(&cublas_), "device=cuda:{}", device_);
    TANDEM_CUBLAS_CHECK(cublasSetStream(cublas_, stream_), "device=cuda:{}", device_);
    // A workspace of our own keeps cuBLAS from allocating behind the caching allocator's back.
    cublas_workspace_ = ctx_.allocator().allocate(kCublasWorkspaceBytes);
    TANDEM_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes), "bytes={}",
                        kCublasWorkspaceBytes);
    // Results must not depend on cuBLAS splitting a reduction across atomics.
    TANDEM_CUBLAS_CHECK(cublasSetAtomicsMode(cublas_, CUBLAS_ATOMICS_NOT_ALLOWED), "device=cuda:{}", device_);
  }
  return cublas_;
}

cublasLtHandle_t CudaContext::cublas_lt() {
  if (cublas_lt_ == nullptr) TANDEM_CUBLAS_CHECK(cublasLtCreate(&cublas_lt_), "device=cuda:{}", device_);
  return cublas_lt_;
}

void* CudaContext::workspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  // Stream order makes the swap safe: the old buffer's users are queued before any later user of
  // whatever block the allocator hands out next on this stream.
  size_t grown = std::max(bytes, workspace_bytes_ * 2);
  // The block must belong to this context's stream pool whatever stream the calling thread has
  // bound, or another stream could be handed the old buffer while our queued kernels read it.
  StreamScope bind(&ctx_.stream());
  if (workspace_ != nullptr) ctx_.allocator().deallocate(workspace_, workspace_bytes_);
  workspace_ = nullptr;
  workspace_bytes_ = 0;
  workspace_ = ctx_.allocator().allocate(grown);
  workspace_bytes_ = grown;
  return workspace_;
}

CudaContext& cuda_context(ExecutionContext& ctx) {
  int current = -1;
  TANDEM_CUDA_CHECK(cudaGetDevice(&current), "");
  if (current != ctx.device().index) {
    TANDEM_CUDA_CHECK(cudaSetDevice(ctx.device().index), "device={}", ctx.device().str());
  }
  if (auto* existing = dynamic_cast<CudaContext*>(ctx.extension())) return *existing;
  auto created = std::make_unique<CudaContext>(ctx);
  CudaContext& ref = *created;
  ctx.set_extension(std::move(created));
  return ref;
}

Launch launch_for(int64_t n) {
  constexpr int64_t kThreads = 256;
  constexpr int64_t kMaxBlocks = 65535;  // grid-stride loops cover the rest
  int64_t blocks = std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks);
  return {static_cast<unsigned>(blocks), static_cast<unsigned>(kThreads)};
}

}  // namespace tandem::cuda
