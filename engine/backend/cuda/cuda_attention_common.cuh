// What both CUDA attention paths (cuda_attention.cu, the tiled kernels; cuda_attention_unfused.cu,
// cuBLAS products around row kernels) share: the problem's layout and the per-score rules (mask,
// causal, dropout) of attention_math.h.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "engine/backend/attention_math.h"
#include "engine/backend/kernels.h"

namespace tandem::backend::cuda {

struct AttnLayout {
  int64_t heads, h, tq, tk, d, dv;  // heads = B * H
  const float* mask;                // (B or 1, H or 1, Tq, Tk) added to the scores, or null
  int64_t mask_b_stride, mask_h_stride;
  float scale;
  bool causal;
  float dropout_p, keep_scale;  // keep_scale = 1 / (1 - p)
  uint64_t seed;
};

AttnLayout attn_layout(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& mask);

// The score of (head bh, query i, key j) from the raw product q.k: scaled, masked, -inf where the
// causal rule hides the key.
__device__ __forceinline__ float attn_score(const AttnLayout& a, int64_t bh, int64_t i, int64_t j, float dot) {
  if (a.causal && j > attention_math::last_visible_key(i, a.tq, a.tk)) return -INFINITY;
  float s = dot * a.scale;
  if (a.mask != nullptr) {
    s += a.mask[(bh / a.h) * a.mask_b_stride + (bh % a.h) * a.mask_h_stride + i * a.tk + j];
  }
  return s;
}

// The factor dropout multiplies probability (bh, i, j) by: 0 or 1 / (1 - p).
__device__ __forceinline__ float attn_dropout(const AttnLayout& a, int64_t bh, int64_t i, int64_t j) {
  if (a.dropout_p <= 0.0f) return 1.0f;
  return attention_math::kept(a.seed, a.dropout_p, bh, i, j, a.tq, a.tk) ? a.keep_scale : 0.0f;
}

// Keys [0, key_end) can be visible to the queries before query_end.
__device__ __forceinline__ int64_t attn_key_end(const AttnLayout& a, int64_t query_end) {
  if (!a.causal) return a.tk;
  const int64_t last = attention_math::last_visible_key(query_end - 1, a.tq, a.tk) + 1;
  return last < 0 ? 0 : (last > a.tk ? a.tk : last);
}

// delta[row] = sum over c of dy[row][c] y[row][c] (the softmax backward's row term), warp per row.
void launch_attention_delta(const float* y, const float* dy, float* delta, int64_t rows, int64_t dv,
                            cudaStream_t stream);

// The unfused path (cuda_attention_unfused.cu): any head size; keeps (Tq, Tk) scores per head.
void attention_forward_unfused(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& mask, Tensor& y, Tensor& lse);
void attention_backward_unfused(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor& mask, const Tensor& y, const Tensor& lse,
                                const Tensor& dy, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace tandem::backend::cuda
