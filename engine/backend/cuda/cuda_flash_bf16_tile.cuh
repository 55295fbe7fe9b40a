// What the bf16 tensor-core attention kernels share: block geometry, shared-memory tiles filled by
// asynchronous copies, and the score rules (scale in log2 units, causal and tail masks, dropout).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "engine/backend/cuda/cuda_attention_common.cuh"
#include "engine/backend/cuda/cuda_mma.cuh"
#include "engine/backend/cuda/cuda_reduce.cuh"

namespace tandem::backend::cuda::flash {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = 16;                   // each warp owns 16 rows of its block's tile
constexpr int kBlockRows = kWarps * kWarpRows;  // 64
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

using bf16 = __nv_bfloat16;

// Tile rows are padded by 8 elements (16 bytes): see cuda_mma.cuh.
template <int D>
constexpr int pitch() {
  return D + 8;
}

// Copies rows [r0, r0 + Rows) of a (row-strided) bf16 matrix into a padded tile, zero-filling rows
// at or beyond r_end; one commit group per call.
template <int D, int Rows>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* base, int64_t row_stride, int64_t r0, int64_t r_end) {
  constexpr int kChunks = D / 8;  // 16-byte pieces of a row
  for (int c = threadIdx.x; c < Rows * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = r0 + r < r_end;
    const bf16* src = valid ? base + (r0 + r) * row_stride + col : base;
    mma::copy_16(tile + r * pitch<D>() + col, src, valid);
  }
  mma::copy_commit();
}

// Query i sees key j: inside the keys, and not after the causal diagonal.
__device__ __forceinline__ bool visible(const AttnLayout& a, int64_t i, int64_t j) {
  return j < a.tk && (!a.causal || j <= attention_math::last_visible_key(i, a.tq, a.tk));
}

// Whether any (query, key) of a tile of queries from i0 and keys [j0, j0 + cols) is hidden, so that
// its scores need the per-element rule (the first query sees the fewest keys); other tiles skip it.
__device__ __forceinline__ bool tile_needs_mask(const AttnLayout& a, int64_t i0, int64_t j0, int cols) {
  if (j0 + cols > a.tk) return true;
  return a.causal && j0 + cols - 1 > attention_math::last_visible_key(i0, a.tq, a.tk);
}

// The lse of a query in log2 units, +inf where the query is outside the problem or sees no key, so
// that every probability recomputed from it is exp2(s - inf) = 0.
__device__ __forceinline__ float lse_log2(const AttnLayout& a, const float* lse, int64_t bh, int64_t i) {
  if (i >= a.tq) return INFINITY;
  const float v = lse[bh * a.tq + i];
  return v == -INFINITY ? INFINITY : v * kLog2e;
}

}  // namespace tandem::backend::cuda::flash
