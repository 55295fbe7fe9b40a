// The pieces both CPU attention kernels share: the f32 tiles on dnnl_sgemm (cpu_attention.cpp)
// and the bf16 products on oneDNN's matmul (cpu_attention_bf16.cpp). Defined in cpu_attention.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "engine/backend/attention_math.h"
#include "engine/backend/cpu/cpu_kernels.h"

namespace tandem::backend::cpu::attention {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The layout of one call: (B * H) heads of tq queries and tk keys.
struct Problem {
  int64_t heads, h, tq, tk, d, dv;
  const float *q, *k, *v, *mask;
  int64_t mask_b_stride, mask_h_stride;  // 0 where the mask broadcasts over batch or heads
  AttentionParams p;

  const float* mask_row(int64_t bh, int64_t i) const {
    return mask + (bh / h) * mask_b_stride + (bh % h) * mask_h_stride + i * tk;
  }
  // Keys [0, key_end) can be visible to queries [i0, i1).
  int64_t key_end(int64_t i1) const {
    return p.causal ? std::clamp<int64_t>(attention_math::last_visible_key(i1 - 1, tq, tk) + 1, 0, tk) : tk;
  }
};

Problem problem_of(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask);

// The largest of s[0, n), -inf when n is 0 (with a NaN among them, either the NaN or the largest
// of the others: a NaN then reaches the output through exp, unless every other score is -inf).
float row_max(const float* s, int64_t n);
// s[i] = exp(s[i] - m) in place (m finite, every s[i] - m <= 0); returns their sum.
float exp_row(float* s, int64_t n, float m);

// Adds the mask to scores s (nq x nk, row stride nk) of queries [i0, ...) and keys [j0, ...), and
// sets -inf where causality hides a key.
void mask_scores(const Problem& pr, int64_t bh, int64_t i0, int64_t nq, int64_t j0, int64_t nk, float* s);

// Dropout on probabilities p (nq x nk) of queries [i0, ...) and keys [j0, ...): kept ones scaled
// by 1 / (1 - p), the others 0.
void drop(const Problem& pr, int64_t bh, int64_t i0, int64_t nq, int64_t j0, int64_t nk, float* p);

// delta[row] = sum over c of y[row, c] dy[row, c] (in double), the softmax backward's row term.
void row_dots(const Problem& pr, const float* y, const float* dy, float* delta);

// Under precision: bf16 (cpu_attention_bf16.cpp): whether this call takes the bf16 kernels (its
// score rows fit their per-thread buffers), and those kernels, which write what the f32 ones do.
bool runs_in_bf16(const Ctx& ctx, const Problem& pr);
void forward_bf16(Ctx& ctx, const Problem& pr, float* y, float* lse);
void backward_bf16(Ctx& ctx, const Problem& pr, const float* y, const float* dy, const float* lse, float* dq,
                   float* dk, float* dv);

}  // namespace tandem::backend::cpu::attention
