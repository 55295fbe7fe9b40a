// The kernels of cuda_matmul_kernels.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "engine/backend/cuda/cuda_matmul_kernels.h"

namespace tandem::backend::cuda::detail {
namespace {

// Column sums: a block covers 32 adjacent columns (threadIdx.x) with kRowLanes threads per column
// (threadIdx.y) striding over the rows, so each warp reads 32 consecutive floats of a row. The lanes
// of a column are then added in lane order by one thread: a fixed order whatever the timing.
constexpr int kColumnTile = 32;
constexpr int kRowLanes = 16;
constexpr int64_t kMaxBlocks = 65535;  // grid-stride loops cover the rest

__device__ __forceinline__ double widen(float v) { return v; }
__device__ __forceinline__ double widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void __launch_bounds__(kColumnTile* kRowLanes)
    column_sums_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, float* __restrict__ y) {
  __shared__ double lanes[kRowLanes][kColumnTile];
  const int64_t tiles = (cols + kColumnTile - 1) / kColumnTile;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t j = tile * kColumnTile + threadIdx.x;
    double acc = 0.0;
    if (j < cols) {
      for (int64_t i = threadIdx.y; i < rows; i += kRowLanes) acc += widen(x[i * cols + j]);
    }
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
      double total = 0.0;
      for (int lane = 0; lane < kRowLanes; ++lane) total += lanes[lane][threadIdx.x];
      y[j] = static_cast<float>(total);
    }
    __syncthreads();  // the next tile overwrites `lanes`
  }
}

__global__ void broadcast_rows_kernel(const float* __restrict__ b, int64_t rows, int64_t cols,
                                      float* __restrict__ y) {
  const int64_t n = rows * cols;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    y[i] = b[i % cols];
  }
}

template <typename T>
cudaError_t column_sums(const T* x, int64_t rows, int64_t cols, float* y, cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  const int64_t tiles = (cols + kColumnTile - 1) / kColumnTile;
  const dim3 block(kColumnTile, kRowLanes);
  column_sums_kernel<<<static_cast<unsigned>(std::min(tiles, kMaxBlocks)), block, 0, stream>>>(x, rows, cols, y);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_column_sums(const float* x, int64_t rows, int64_t cols, float* y, cudaStream_t stream) {
  return column_sums(x, rows, cols, y, stream);
}

cudaError_t launch_column_sums_bf16(const void* x, int64_t rows, int64_t cols, float* y, cudaStream_t stream) {
  return column_sums(static_cast<const __nv_bfloat16*>(x), rows, cols, y, stream);
}

cudaError_t launch_broadcast_rows(const float* b, int64_t rows, int64_t cols, float* y, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0) return cudaSuccess;
  constexpr int64_t kThreads = 256;
  const int64_t blocks = std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks);
  broadcast_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(b, rows, cols, y);
  return cudaGetLastError();
}

}  // namespace tandem::backend::cuda::detail
