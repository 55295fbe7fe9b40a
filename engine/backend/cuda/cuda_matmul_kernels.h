// The small kernels of cuda_matmul.cpp around its cuBLASLt calls (in cuda_matmul_kernels.cu).
// Compiled by nvcc too, so plain pointers and sizes only, no engine header. Each launcher queues
// its kernel on `stream` and returns the launch error, which the caller checks and names.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::backend::cuda::detail {

// y[j] = sum over i of x[i * cols + j] for a row-major (rows, cols) x: the column sums, added in
// double in a fixed order (bitwise repeatable, no atomics). rows may be 0 (y = 0).
cudaError_t launch_column_sums(const float* x, int64_t rows, int64_t cols, float* y, cudaStream_t stream);
// The same over a bf16 x (a linear layer's bf16 dy under precision: bf16), widened exactly.
cudaError_t launch_column_sums_bf16(const void* x, int64_t rows, int64_t cols, float* y, cudaStream_t stream);

// y[i * cols + j] = b[j] for a row-major (rows, cols) y: a bias broadcast over rows.
cudaError_t launch_broadcast_rows(const float* b, int64_t rows, int64_t cols, float* y, cudaStream_t stream);

}  // namespace tandem::backend::cuda::detail
