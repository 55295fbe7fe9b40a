// What the CUDA attention paths share (cuda_attention.cu, the f32 tiled kernels; cuda_flash_bf16_*.cu,
// the tensor-core kernels; cuda_attention_unfused.cu, cuBLAS products around row kernels): the
// problem's layout and the per-score rules (mask, causal, dropout) of attention_math.h.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "engine/backend/attention_math.h"
#include "engine/backend/kernels.h"

namespace tandem::backend::cuda {

// Where row i of head (b, h) starts, in elements: b batch + h head + i row; a row's D columns are
// contiguous. (B, H, T, D) tensors have strides (H T D, T D, D); the packed projection (B, T, 3 H D)
// has (3 T H D, D, 3 H D) from the first column of its q, k or v part.
struct HeadStrides {
  int64_t batch = 0, head = 0, row = 0;
};

struct AttnLayout {
  int64_t heads, h, tq, tk, d, dv;  // heads = B * H
  const float* mask;                // (B or 1, H or 1, Tq, Tk) added to the scores, or null
  int64_t mask_b_stride, mask_h_stride;
  float scale;
  bool causal;
  float dropout_p, keep_scale;  // keep_scale = 1 / (1 - p)
  uint64_t seed;
  // q and dq, k and dk, v and dv, y and dy (every backend tensor of a kind has its input's layout).
  HeadStrides qs, ks, vs, ys;
};

// The offset of row i of head bh (= b H + h).
__host__ __device__ __forceinline__ int64_t head_row(const HeadStrides& s, int64_t h, int64_t bh, int64_t i) {
  return (bh / h) * s.batch + (bh % h) * s.head + i * s.row;
}

// (B, H, T, D) contiguous q, k, v and y.
AttnLayout attn_layout(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask);
// The packed projection qkv (B, T, 3 H D) and y (B, T, H D); q, k and v start at columns 0, H D, 2 H D.
AttnLayout packed_attn_layout(const AttentionParams& p, int64_t heads, const Tensor& qkv);

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
// The same for y and dy laid out by a.ys: delta[bh Tq + i] for each head bh and query i. y is f32, or
// bf16 when y_bf16 (packed attention's bf16 output, read as the forward rounded it).
void launch_attention_delta(const AttnLayout& a, const void* y, bool y_bf16, const float* dy, float* delta,
                            cudaStream_t stream);

// The f32 kernels (cuda_attention.cu): head sizes 16, 32, 48 and 64 (d == dv), any mask.
bool flash_f32_head_size(int64_t d);
void flash_f32_forward(const AttnLayout& a, const float* q, const float* k, const float* v, float* y, float* lse,
                       cudaStream_t stream);
struct F32AttentionGrads {
  const float *q, *k, *v, *dy, *lse, *delta;
  float *dq, *dk, *dv;
};
void flash_f32_backward(const AttnLayout& a, const F32AttentionGrads& g, cudaStream_t stream);

// The tensor-core kernels (cuda_flash_bf16_forward.cu, cuda_flash_bf16_backward.cu): bf16 q, k, v and
// dy, f32 accumulation, f32 (or bf16: FlashBf16Args::y16) y, f32 gradients; no mask; head sizes 64 and 128 (d == dv); sm_80 and newer.
// Every row and column start must be 16-byte aligned (strides and offsets multiples of 8 elements).
struct FlashBf16Args {
  AttnLayout a;
  const void *q, *k, *v;   // bf16
  const void* dy;          // bf16, laid out as y; backward only
  float *y, *lse;          // forward: its outputs
  void* y16;               // forward: y in bf16 instead, when set (packed attention's bf16 output)
  const float* saved_lse;  // backward: the forward's lse
  const float* delta;      // backward: launch_attention_delta's rows
  float *dq, *dk, *dv;     // backward
};
bool flash_bf16_head_size(int64_t d);
void flash_bf16_forward(const FlashBf16Args& f, cudaStream_t stream);
void flash_bf16_backward(const FlashBf16Args& f, cudaStream_t stream);

// The unfused path (cuda_attention_unfused.cu): any head size; keeps (Tq, Tk) scores per head.
void attention_forward_unfused(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& mask, Tensor& y, Tensor& lse);
void attention_backward_unfused(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& mask, const Tensor& y, const Tensor& lse, const Tensor& dy, Tensor& dq,
                                Tensor& dk, Tensor& dv);

}  // namespace tandem::backend::cuda
