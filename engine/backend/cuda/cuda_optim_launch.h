// The multi-tensor launchers of cuda_optim.cu, called by the optimizer entries of the kernel table
// in cuda_optim.cpp. Plain pointers and sizes only, no engine header: the .cu side then needs
// neither the engine's C++20 headers nor fmt under nvcc (which needs workarounds in C++20 mode).
// Each launcher queues its kernels on `stream` and returns the first launch error (cudaSuccess
// when all went in), which the caller checks and names.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "engine/backend/optim_math.h"

namespace tandem::backend::cuda::detail {

// One tensor of a multi-tensor update: up to four same-sized f32 arrays (sgd: w, dw, v;
// adamw: w, dw, m, v; squared norm: x) of numel elements, and (sgd, adamw) the bf16 shadow of w
// that the update rewrites (Tensor::bf16_shadow). Unused slots are null.
struct MultiTensorEntry {
  float* p[4];
  void* shadow;  // __nv_bfloat16[numel], or null
  int64_t numel;
};

// Every block of a launch works on one tensor, walking its chunks; a tensor gets one block per
// chunk up to kMaxBlocksPerTensor, so the grid stays bounded whatever the tensor sizes.
inline constexpr int kMultiTensorThreads = 256;
inline constexpr int kMultiTensorUnroll = 4;
inline constexpr int64_t kMultiTensorChunk = int64_t{kMultiTensorThreads} * kMultiTensorUnroll;
inline constexpr int64_t kMaxBlocksPerTensor = 512;

inline int64_t multi_tensor_blocks(int64_t numel) {
  if (numel <= 0) return 0;
  int64_t chunks = (numel + kMultiTensorChunk - 1) / kMultiTensorChunk;
  return chunks < kMaxBlocksPerTensor ? chunks : kMaxBlocksPerTensor;
}

// In place: entry.p = {w, dw, v (null without momentum), unused}; entry.shadow, where not null,
// receives the updated w rounded to nearest even (__float2bfloat16_rn, as cast_f32_to_bf16).
cudaError_t launch_sgd(const SgdStep& step, const MultiTensorEntry* entries, size_t count, cudaStream_t stream);
// In place: entry.p = {w, dw, m, v}; entry.shadow as launch_sgd's.
cudaError_t launch_adamw(const AdamWStep& step, const MultiTensorEntry* entries, size_t count, cudaStream_t stream);
// *y = sum over entries of the sum of squares of entry.p[0], accumulated in double.
// partials: device scratch of at least max(1, sum of multi_tensor_blocks(numel)) doubles.
// Two passes with fixed orders (per-block sums, then one block adds them in block order), no
// atomics: the result is bitwise the same on every call.
cudaError_t launch_squared_norm(const MultiTensorEntry* entries, size_t count, double* partials, float* y,
                                cudaStream_t stream);
// In place: entry.p[0] *= clip_factor(*squared_norm, max_norm) (optim_math.h), the factor read on the
// device; no element is written when it is 1.
cudaError_t launch_clip_by_global_norm(const MultiTensorEntry* entries, size_t count, const float* squared_norm,
                                       double max_norm, cudaStream_t stream);

}  // namespace tandem::backend::cuda::detail
