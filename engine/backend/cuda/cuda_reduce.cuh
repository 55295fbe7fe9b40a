// Deterministic warp and block reductions for our own kernels: a fixed shuffle tree inside each warp
// and a fixed order across warps, so for a given block size the result is bitwise the same on every
// run (no atomics anywhere).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffu;

// Lane 0 ends up with the sum of the 32 lanes' values (the other lanes hold partial sums).
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_down_sync(kFullWarp, v, offset);
  return v;
}

// The sum of every thread's value, valid in thread 0. blockDim.x must be a multiple of 32 (at most
// 1024) and every thread of the block must call it. `scratch` holds 32 elements of shared memory;
// the trailing barrier lets the caller reuse it for a second reduction at once.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = threadIdx.x < warps ? scratch[threadIdx.x] : T(0);
  if (warp == 0) v = warp_sum(v);
  __syncthreads();
  return v;
}

// 64-bit grid-stride bounds: sizes may exceed 2^31.
__device__ __forceinline__ int64_t global_thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace tandem::cuda
