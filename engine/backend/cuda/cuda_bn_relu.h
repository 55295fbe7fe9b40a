// The two ReLU passes batch norm needs when cuDNN does not fuse the activation itself
// (cuda_bn_relu.cu): the forward clamp in place on y, and the backward mask of dy by y > 0.
// Plain pointers and a stream, so the .cu file includes no engine headers; the caller checks
// the launch (TANDEM_CUDA_LAUNCH_CHECK) right after.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::backend::cuda {

// y[i] = max(y[i], 0) for i < n (NaN stays NaN, as PyTorch's relu).
void launch_bn_relu_in_place(float* y, int64_t n, unsigned blocks, unsigned threads, cudaStream_t stream);

// out[i] = y[i] > 0 ? dy[i] : 0 for i < n; y is the forward output (after the ReLU).
void launch_bn_relu_mask(const float* y, const float* dy, float* out, int64_t n, unsigned blocks, unsigned threads,
                         cudaStream_t stream);

// The same mask read from a bf16 y (batch norm with bf16 activations): relu_backward's kernel then.
void launch_bn_relu_mask_bf16(const void* y_bf16, const float* dy, float* out, int64_t n, unsigned blocks,
                              unsigned threads, cudaStream_t stream);

}  // namespace tandem::backend::cuda
