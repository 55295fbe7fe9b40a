// Grid-stride ReLU passes for batch norm's unfused path (see cuda_bn_relu.h).
#include "engine/backend/cuda/cuda_bn_relu.h"

#include <cuda_bf16.h>

namespace tandem::backend::cuda {
namespace {

__global__ void bn_relu_in_place_kernel(float* y, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = y[i];
    // `v < 0` is false for NaN, so a NaN passes through and shows up in the loss.
    if (v < 0.0f) y[i] = 0.0f;
  }
}

__global__ void bn_relu_mask_kernel(const float* y, const float* dy, float* out, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  }
}

__global__ void bn_relu_mask_bf16_kernel(const __nv_bfloat16* y, const float* dy, float* out, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = __bfloat162float(y[i]) > 0.0f ? dy[i] : 0.0f;
  }
}

}  // namespace

void launch_bn_relu_in_place(float* y, int64_t n, unsigned blocks, unsigned threads, cudaStream_t stream) {
  if (n == 0) return;
  bn_relu_in_place_kernel<<<blocks, threads, 0, stream>>>(y, n);
}

void launch_bn_relu_mask(const float* y, const float* dy, float* out, int64_t n, unsigned blocks, unsigned threads,
                         cudaStream_t stream) {
  if (n == 0) return;
  bn_relu_mask_kernel<<<blocks, threads, 0, stream>>>(y, dy, out, n);
}

void launch_bn_relu_mask_bf16(const void* y_bf16, const float* dy, float* out, int64_t n, unsigned blocks,
                              unsigned threads, cudaStream_t stream) {
  if (n == 0) return;
  bn_relu_mask_bf16_kernel<<<blocks, threads, 0, stream>>>(static_cast<const __nv_bfloat16*>(y_bf16), dy, out, n);
}

}  // namespace tandem::backend::cuda
