// What the bf16 tensor-core attention kernels share: block geometry, shared-memory tiles filled by
// asynchronous copies, the score rules (scale in log2 units, causal and tail masks, dropout) and the
// two shapes of warp product.
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

// Where head bh's rows of a bf16 tensor (q, k, v or dy, with its strides) start.
__device__ __forceinline__ const bf16* head_base(const void* data, const HeadStrides& s, const AttnLayout& a,
                                                 int64_t bh) {
  return static_cast<const bf16*>(data) + head_row(s, a.h, bh, 0);
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

// acc[n-tile] += A B for a 16-row A (one fragment per 16 columns of k) and B = rows of a tile taken
// transposed (load_b_rows): S = Q K^T in both directions, and the backward's K Q^T, V dO^T and dO V^T.
template <int K, int N>
__device__ __forceinline__ void product_rows(float (&acc)[N / 8][4], const uint32_t (&a)[K / 16][4], const bf16* tile,
                                             int pitch) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
#pragma unroll
    for (int nt = 0; nt < N / 8; ++nt) {
      uint32_t b[2];
      mma::load_b_rows(b, tile, pitch, nt * 8, kk * 16);
      mma::mma_16816(acc[nt], a[kk], b);
    }
  }
}

// acc[n-tile] += C B with C the f32 tile (16 rows, K columns) in accumulator layout and B the
// row-major tile (K rows, N columns): O += P V, and the backward's dV += P^T dO, dK += dS^T Q and
// dQ += dS K.
template <int K, int N>
__device__ __forceinline__ void product_cols(float (&acc)[N / 8][4], const float (&c)[K / 8][4], const bf16* tile,
                                             int pitch) {
#pragma unroll
  for (int ks = 0; ks < K / 16; ++ks) {
    uint32_t a[4];
    mma::a_from_c(a, c[2 * ks], c[2 * ks + 1]);
#pragma unroll
    for (int nd = 0; nd < N / 16; ++nd) {
      uint32_t b[4];
      mma::load_b_cols_x2(b, tile, pitch, ks * 16, nd * 16);
      const uint32_t lo[2] = {b[0], b[1]}, hi[2] = {b[2], b[3]};
      mma::mma_16816(acc[2 * nd], a, lo);
      mma::mma_16816(acc[2 * nd + 1], a, hi);
    }
  }
}

}  // namespace tandem::backend::cuda::flash
