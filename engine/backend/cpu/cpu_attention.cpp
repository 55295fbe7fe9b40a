// scaled_dot_product_attention on the CPU in FlashAttention's scheme: for each (batch, head) and
// block of kBlockQ queries, key tiles of kBlockK with an online softmax (running max and sum, the
// output rescaled as the max grows). The backward recomputes each tile's probabilities from the
// saved log-sum-exp, so no Tq x Tk tensor is ever kept: the memory beyond q, k, v, y and their
// gradients is lse (B, H, Tq) and a few tiles per thread. Tile products are oneDNN's sgemm (one
// thread each: the tiles are the parallel work), exponentials a vectorised polynomial. Under
// precision: bf16 the products run in bf16 instead (cpu_attention_bf16.cpp).
#include <dnnl.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <vector>

#include "engine/backend/cpu/cpu_attention_parts.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/core/error.h"

namespace tandem::backend::cpu {
namespace attention {
namespace {

namespace am = attention_math;

// exp(x) for x <= 0 (arguments are logits minus a running max), within about 2 ulp: x = n ln2 + r,
// |r| <= ln2 / 2, exp(r) by its degree-6 Taylor polynomial, 2^n through the exponent bits. Below
// -87.3 (where 2^n leaves the normal range) the answer is 0, which is what masked logits need.
inline float exp_nonpositive(float x) {
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t exponent = (static_cast<int32_t>(n) + 127) << 23;
  const float e = p * std::bit_cast<float>(exponent);
  return x < -87.3f ? 0.0f : e;
}

// s[i] = exp(s[i] - m) in place; returns their sum. m is finite.
[[gnu::always_inline]] inline float exp_row_body(float* s, int64_t n, float m) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    const float e = exp_nonpositive(s[i] - m);
    s[i] = e;
    sum += e;
  }
  return sum;
}
[[gnu::target("avx512f")]] float exp_row_avx512(float* s, int64_t n, float m) { return exp_row_body(s, n, m); }
[[gnu::target("avx2")]] float exp_row_avx2(float* s, int64_t n, float m) { return exp_row_body(s, n, m); }

// Vector maxima by hand: GCC leaves a max reduction scalar without -ffast-math (even under omp
// simd), a chain of dependent vmaxss that cost the bf16 kernel a tenth of a GPT step.
float row_max_scalar(const float* s, int64_t n) {
  float m = kNegInf;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, s[i]);
  return m;
}
// The maskz forms: the plain _mm512_max_ps trips -Wmaybe-uninitialized (GCC bug 105593).
[[gnu::target("avx512f")]] float row_max_avx512(const float* s, int64_t n) {
  constexpr __mmask16 kAll = 0xffff;
  __m512 m = _mm512_set1_ps(kNegInf);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_maskz_max_ps(kAll, m, _mm512_loadu_ps(s + i));
  const auto tail = static_cast<__mmask16>((1u << (n - i)) - 1u);
  m = _mm512_maskz_max_ps(kAll, m, _mm512_mask_loadu_ps(_mm512_set1_ps(kNegInf), tail, s + i));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, m);
  return row_max_scalar(lanes, 16);
}
[[gnu::target("avx2")]] float row_max_avx2(const float* s, int64_t n) {
  __m256 m = _mm256_set1_ps(kNegInf);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  return std::max(row_max_scalar(lanes, 8), row_max_scalar(s + i, n - i));
}

int simd_level() {
  static const int level = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
  return level;
}

}  // namespace

// Chosen by a flag read once, not by target_clones: an ifunc resolver runs while the program is
// loaded, before ThreadSanitizer's runtime starts, and crashed every TSan build at start.
float exp_row(float* s, int64_t n, float m) {
  if (simd_level() == 2) return exp_row_avx512(s, n, m);
  if (simd_level() == 1) return exp_row_avx2(s, n, m);
  return exp_row_body(s, n, m);
}

float row_max(const float* s, int64_t n) {
  if (simd_level() == 2) return row_max_avx512(s, n);
  if (simd_level() == 1) return row_max_avx2(s, n);
  return row_max_scalar(s, n);
}

Problem problem_of(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  Problem pr{q.dim(0) * q.dim(1), q.dim(1), q.dim(2), k.dim(2), q.dim(3), v.dim(3),
             q.data<float>(), k.data<float>(), v.data<float>(), nullptr, 0, 0, p};
  if (mask.defined()) {
    pr.mask = mask.data<float>();
    pr.mask_h_stride = mask.dim(1) == 1 ? 0 : pr.tq * pr.tk;
    pr.mask_b_stride = mask.dim(0) == 1 ? 0 : mask.dim(1) * pr.tq * pr.tk;
  }
  return pr;
}

void mask_scores(const Problem& pr, int64_t bh, int64_t i0, int64_t nq, int64_t j0, int64_t nk, float* s) {
  for (int64_t r = 0; r < nq; ++r) {
    float* row = s + r * nk;
    if (pr.mask != nullptr) {
      const float* m = pr.mask_row(bh, i0 + r) + j0;
      for (int64_t c = 0; c < nk; ++c) row[c] += m[c];
    }
    if (pr.p.causal) {
      const int64_t first_hidden = am::last_visible_key(i0 + r, pr.tq, pr.tk) + 1 - j0;
      for (int64_t c = std::max<int64_t>(first_hidden, 0); c < nk; ++c) row[c] = kNegInf;
    }
  }
}

void drop(const Problem& pr, int64_t bh, int64_t i0, int64_t nq, int64_t j0, int64_t nk, float* p) {
  if (pr.p.dropout_p <= 0.0f) return;
  const float keep_scale = pr.p.dropout_p < 1.0f ? 1.0f / (1.0f - pr.p.dropout_p) : 0.0f;
  for (int64_t r = 0; r < nq; ++r) {
    for (int64_t c = 0; c < nk; ++c) {
      const bool kept = am::kept(pr.p.dropout_seed, pr.p.dropout_p, bh, i0 + r, j0 + c, pr.tq, pr.tk);
      p[r * nk + c] = kept ? p[r * nk + c] * keep_scale : 0.0f;
    }
  }
}

void row_dots(const Problem& pr, const float* y, const float* dy, float* delta) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < pr.heads * pr.tq; ++row) {
    double acc = 0.0;
    for (int64_t c = 0; c < pr.dv; ++c) acc += static_cast<double>(y[row * pr.dv + c]) * dy[row * pr.dv + c];
    delta[row] = static_cast<float>(acc);
  }
}

namespace {

constexpr int64_t kBlockQ = 64, kBlockK = 256;

// Records the first failing sgemm of a parallel region; the region cannot throw.
struct GemmStatus {
  std::atomic<int> failed{0};
  void gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    if (dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) != dnnl_success) failed.store(1);
  }
  void check(const char* what, const Tensor& q) const {
    TANDEM_CHECK(failed.load() == 0, ErrorCode::kInternal, "{}: dnnl_sgemm failed on a tile of q {}", what,
                 q.shape().str());
  }
};

// scale q k^T of queries [i0, i0 + nq) and keys [j0, j0 + nk), plus the mask, -inf where causal hides.
void scores(const Problem& pr, GemmStatus& st, int64_t bh, int64_t i0, int64_t nq, int64_t j0, int64_t nk, float* s) {
  st.gemm('N', 'T', nq, nk, pr.d, pr.p.scale, pr.q + (bh * pr.tq + i0) * pr.d, pr.d, pr.k + (bh * pr.tk + j0) * pr.d,
          pr.d, 0.0f, s, nk);
  mask_scores(pr, bh, i0, nq, j0, nk, s);
}

std::vector<float>& tile(int which) {
  thread_local std::vector<float> tiles[3];
  std::vector<float>& t = tiles[which];
  if (t.size() < static_cast<size_t>(kBlockQ * kBlockK)) t.resize(static_cast<size_t>(kBlockQ * kBlockK));
  return t;
}

void forward_block(const Problem& pr, GemmStatus& st, int64_t bh, int64_t i0, float* y, float* lse) {
  const int64_t nq = std::min(kBlockQ, pr.tq - i0);
  float* s = tile(0).data();
  float m[kBlockQ], l[kBlockQ];
  std::fill_n(m, nq, kNegInf);
  std::fill_n(l, nq, 0.0f);
  float* out = y + (bh * pr.tq + i0) * pr.dv;
  std::fill_n(out, nq * pr.dv, 0.0f);
  const int64_t key_end = pr.key_end(i0 + nq);
  for (int64_t j0 = 0; j0 < key_end; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, key_end - j0);
    scores(pr, st, bh, i0, nq, j0, nk, s);
    for (int64_t r = 0; r < nq; ++r) {
      float* row = s + r * nk;
      const float tile_max = row_max(row, nk);
      const float m_new = std::max(m[r], tile_max);
      if (m_new == kNegInf) {  // nothing visible yet: this tile adds nothing to the row
        std::fill_n(row, nk, 0.0f);
        continue;
      }
      const float rescale = m[r] == kNegInf ? 0.0f : std::exp(m[r] - m_new);
      l[r] = l[r] * rescale + exp_row(row, nk, m_new);
      m[r] = m_new;
      if (rescale != 1.0f) {
        for (int64_t c = 0; c < pr.dv; ++c) out[r * pr.dv + c] *= rescale;
      }
    }
    drop(pr, bh, i0, nq, j0, nk, s);  // the normaliser l counts every probability, dropped or not
    st.gemm('N', 'N', nq, pr.dv, nk, 1.0f, s, nk, pr.v + (bh * pr.tk + j0) * pr.dv, pr.dv, 1.0f, out, pr.dv);
  }
  for (int64_t r = 0; r < nq; ++r) {
    // A query that sees no key gets zeros (and lse -inf), where the plain softmax would give NaN.
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    for (int64_t c = 0; c < pr.dv; ++c) out[r * pr.dv + c] *= inv;
    lse[bh * pr.tq + i0 + r] = l[r] > 0.0f ? m[r] + std::log(l[r]) : kNegInf;
  }
}

struct Grads {
  const float *y, *dy, *lse, *delta;
  float *dq, *dk, *dv;
};

void backward_block(const Problem& pr, GemmStatus& st, const Grads& g, int64_t bh, int64_t i0) {
  const int64_t nq = std::min(kBlockQ, pr.tq - i0);
  float *p = tile(0).data(), *pd = tile(1).data(), *dp = tile(2).data();
  const float* q_blk = pr.q + (bh * pr.tq + i0) * pr.d;
  const float* dy_blk = g.dy + (bh * pr.tq + i0) * pr.dv;
  float* dq_blk = g.dq + (bh * pr.tq + i0) * pr.d;
  const int64_t key_end = pr.key_end(i0 + nq);
  const bool dropout = pr.p.dropout_p > 0.0f;
  for (int64_t j0 = 0; j0 < key_end; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, key_end - j0);
    scores(pr, st, bh, i0, nq, j0, nk, p);
    for (int64_t r = 0; r < nq; ++r) {
      const float lse = g.lse[bh * pr.tq + i0 + r];
      float* row = p + r * nk;
      if (lse == kNegInf) {
        std::fill_n(row, nk, 0.0f);
      } else {
        exp_row(row, nk, lse);  // the forward's probabilities, recomputed
      }
    }
    const float* used = p;  // the probabilities as they multiplied v
    if (dropout) {
      std::copy_n(p, nq * nk, pd);
      drop(pr, bh, i0, nq, j0, nk, pd);
      used = pd;
    }
    const float* v_tile = pr.v + (bh * pr.tk + j0) * pr.dv;
    st.gemm('T', 'N', nk, pr.dv, nq, 1.0f, used, nk, dy_blk, pr.dv, 1.0f, g.dv + (bh * pr.tk + j0) * pr.dv, pr.dv);
    st.gemm('N', 'T', nq, nk, pr.dv, 1.0f, dy_blk, pr.dv, v_tile, pr.dv, 0.0f, dp, nk);
    if (dropout) drop(pr, bh, i0, nq, j0, nk, dp);  // the gradient reaches a probability through its mask
    // dS = P (dP - delta): the softmax's backward, delta = rowsum(dy y).
    for (int64_t r = 0; r < nq; ++r) {
      const float delta = g.delta[bh * pr.tq + i0 + r];
      for (int64_t c = 0; c < nk; ++c) dp[r * nk + c] = p[r * nk + c] * (dp[r * nk + c] - delta);
    }
    const float* k_tile = pr.k + (bh * pr.tk + j0) * pr.d;
    st.gemm('N', 'N', nq, pr.d, nk, pr.p.scale, dp, nk, k_tile, pr.d, 1.0f, dq_blk, pr.d);
    st.gemm('T', 'N', nk, pr.d, nq, pr.p.scale, dp, nk, q_blk, pr.d, 1.0f, g.dk + (bh * pr.tk + j0) * pr.d, pr.d);
  }
}

}  // namespace
}  // namespace attention

using namespace attention;

void attention_forward(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& mask, Tensor& y, Tensor& lse) {
  apply_thread_budget(ctx);
  const Problem pr = problem_of(p, q, k, v, mask);
  float *py = y.data<float>(), *plse = lse.data<float>();
  if (runs_in_bf16(ctx, pr)) return forward_bf16(ctx, pr, py, plse);
  const int64_t blocks = (pr.tq + kBlockQ - 1) / kBlockQ;
  GemmStatus st;
#pragma omp parallel for schedule(dynamic)
  for (int64_t w = 0; w < pr.heads * blocks; ++w) forward_block(pr, st, w / blocks, (w % blocks) * kBlockQ, py, plse);
  st.check("attention_forward", q);
}

void attention_backward(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& mask, const Tensor& y, const Tensor& lse, const Tensor& dy, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  apply_thread_budget(ctx);
  const Problem pr = problem_of(p, q, k, v, mask);
  const float *py = y.data<float>(), *pdy = dy.data<float>();
  if (runs_in_bf16(ctx, pr)) {
    return backward_bf16(ctx, pr, py, pdy, lse.data<float>(), dq.data<float>(), dk.data<float>(), dv.data<float>());
  }
  std::vector<float> delta(static_cast<size_t>(pr.heads * pr.tq));
  row_dots(pr, py, pdy, delta.data());
  const Grads g{py, pdy, lse.data<float>(), delta.data(), dq.data<float>(), dk.data<float>(), dv.data<float>()};
  std::fill_n(g.dq, dq.numel(), 0.0f);
  std::fill_n(g.dk, dk.numel(), 0.0f);
  std::fill_n(g.dv, dv.numel(), 0.0f);
  const int64_t blocks = (pr.tq + kBlockQ - 1) / kBlockQ;
  GemmStatus st;
  // One thread per head: it owns that head's dk and dv, which every query block adds to.
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < pr.heads; ++bh) {
    for (int64_t b = 0; b < blocks; ++b) backward_block(pr, st, g, bh, b * kBlockQ);
  }
  st.check("attention_backward", q);
}

}  // namespace tandem::backend::cpu
