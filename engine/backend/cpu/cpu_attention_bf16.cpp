// scaled_dot_product_attention under precision: bf16 on the CPU: its products in bf16 through
// oneDNN's matmul (the AMX or avx512_core_bf16 kernels), accumulated in f32, as PyTorch's autocast
// runs them; the softmax, its statistics and every output stay f32.
//
// oneDNN 2.6 has no bf16 GEMM call (only dnnl_sgemm), and a matmul primitive costs microseconds per
// call, too much for the f32 kernel's 64 x 256 tiles. So each product here covers a block of up
// to kRows queries against every key they may see at once: q, k, v (and dy) are rounded to bf16
// once per call, each thread keeps one block's scores (kRows x Tk, f32) and its bf16
// probabilities, and the softmax is exact per row rather than online. The memory beyond the
// operands' bf16 copies is those per-thread buffers, never a (Tq, Tk) tensor; keys beyond
// kMaxKeys send the call to the f32 kernel instead.
//
// Forward per (head, block): S = scale q k^T + mask, P = softmax(S) (dropout applied after the
// normaliser, as in f32), y = bf16(P) v, lse = max + log(sum). Backward per head (one thread owns
// its dk and dv): P recomputed from lse, dv += bf16(P)^T dy, dP = dy v^T, dS = P (dP - delta),
// dq = scale bf16(dS) k, dk += scale bf16(dS)^T q.
#include <bit>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_attention_parts.h"
#include "engine/backend/cpu/cpu_bf16.h"
#include "engine/backend/cpu/plan_cache.h"

namespace tandem::backend::cpu::attention {
namespace {

constexpr int64_t kRows = 128;      // queries per product
constexpr int64_t kMaxKeys = 4096;  // scores per thread: kRows x kMaxKeys f32 (2 MiB)

// A product of one call: c (m x n, f32, row stride ldc) = alpha a' b' (+ c when accumulate), a' the
// (m x k) bf16 matrix a (stored k x m when ta), b' the (k x n) bf16 matrix b (stored n x k when tb).
struct Gemm {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha;
  bool accumulate;
};

struct GemmPlan {
  memory::desc a_md, b_md, c_md;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  size_t scratch_bytes;
};

memory::desc bf16_matrix(int64_t rows, int64_t cols, int64_t ld, bool transposed) {
  const memory::dims strides = transposed ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, memory::data_type::bf16, strides);
}

const GemmPlan& plan_of(const Gemm& g) {
  static PlanCache<GemmPlan> cache;
  PlanKey key(1);
  key.add({g.ta, g.tb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.accumulate, std::bit_cast<int32_t>(g.alpha)});
  return cache.get(key, [&] {
    GemmPlan plan{bf16_matrix(g.m, g.k, g.lda, g.ta), bf16_matrix(g.k, g.n, g.ldb, g.tb),
                  memory::desc({g.m, g.n}, memory::data_type::f32, memory::dims{g.ldc, 1}), {}, {}, 0};
    dnnl::primitive_attr attr = user_scratchpad_attr();
    if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
    if (g.accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.0f);
      attr.set_post_ops(sum);
    }
    plan.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(plan.a_md, plan.b_md, plan.c_md), attr, cpu_engine());
    plan.prim = dnnl::matmul(plan.pd);
    plan.scratch_bytes = plan.pd.scratchpad_desc().get_size();
    return plan;
  });
}

void gemm(const Gemm& g, const uint16_t* a, const uint16_t* b, float* c) {
  const GemmPlan& plan = plan_of(g);
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < plan.scratch_bytes) scratch.resize(plan.scratch_bytes);
  const dnnl::engine& engine = cpu_engine();
  Args args{{DNNL_ARG_SRC, memory(plan.a_md, engine, const_cast<uint16_t*>(a))},
            {DNNL_ARG_WEIGHTS, memory(plan.b_md, engine, const_cast<uint16_t*>(b))},
            {DNNL_ARG_DST, memory(plan.c_md, engine, c)},
            {DNNL_ARG_SCRATCHPAD, memory(plan.pd.scratchpad_desc(), engine, scratch.data())}};
  plan.prim.execute(thread_stream(), args);
  thread_stream().wait();
}

// The first failure inside a parallel region (which cannot throw), rethrown after it.
class RegionErrors {
 public:
  template <typename F>
  void run(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex_);
      if (first_.empty()) first_ = e.what();
    }
  }
  void check(const char* op, const Problem& pr) const {
    TANDEM_CHECK(first_.empty(), ErrorCode::kInternal, "{} (bf16, {} heads of {} x {} keys, d {}): {}", op,
                 pr.heads, pr.tq, pr.tk, pr.d, first_);
  }

 private:
  std::mutex mutex_;
  std::string first_;
};

// bf16 copies of a call's operands, rounded once.
struct Operands16 {
  Tensor q, k, v, dy;
  const uint16_t* at(const Tensor& t, int64_t offset) const {
    return static_cast<const uint16_t*>(t.raw_data()) + offset;
  }
};

Tensor rounded(Ctx& ctx, const float* x, int64_t n) {
  Tensor out = Tensor::empty({n}, DType::kBF16, ctx.device());
  round_to_bf16(ctx, x, static_cast<uint16_t*>(out.raw_data()), n);
  return out;
}

Operands16 round_operands(Ctx& ctx, const Problem& pr, const float* dy) {
  Operands16 o{rounded(ctx, pr.q, pr.heads * pr.tq * pr.d), rounded(ctx, pr.k, pr.heads * pr.tk * pr.d),
               rounded(ctx, pr.v, pr.heads * pr.tk * pr.dv), Tensor()};
  if (dy != nullptr) o.dy = rounded(ctx, dy, pr.heads * pr.tq * pr.dv);
  return o;
}

// Per-thread buffers of one block: f32 scores (or probabilities, or their gradient) and bf16 rows.
template <typename T>
T* buffer(int which, int64_t n) {
  thread_local std::vector<T> buffers[2];
  std::vector<T>& b = buffers[which];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

// s = scale q k^T of queries [i0, i0 + nq) against keys [0, nk), masked.
void block_scores(const Problem& pr, const Operands16& o, int64_t bh, int64_t i0, int64_t nq, int64_t nk, float* s) {
  gemm({false, true, nq, nk, pr.d, pr.d, pr.d, nk, pr.p.scale, false}, o.at(o.q, (bh * pr.tq + i0) * pr.d),
       o.at(o.k, bh * pr.tk * pr.d), s);
  mask_scores(pr, bh, i0, nq, 0, nk, s);
}

// Keys [0, n) of the block's row r can be visible; beyond them causality hides every key (scores
// -inf), so the softmax skips them and writes their zeros.
int64_t visible_keys(const Problem& pr, int64_t i, int64_t nk) {
  return pr.p.causal ? std::clamp<int64_t>(attention_math::last_visible_key(i, pr.tq, pr.tk) + 1, 0, nk) : nk;
}

void forward_block(const Problem& pr, const Operands16& o, int64_t bh, int64_t i0, float* y, float* lse) {
  const int64_t nq = std::min(kRows, pr.tq - i0), nk = pr.key_end(i0 + nq);
  float* out = y + (bh * pr.tq + i0) * pr.dv;
  if (nk == 0) {  // no query of the block sees a key
    std::fill_n(out, nq * pr.dv, 0.0f);
    std::fill_n(lse + bh * pr.tq + i0, nq, kNegInf);
    return;
  }
  float* s = buffer<float>(0, nq * nk);
  uint16_t* p16 = buffer<uint16_t>(0, nq * nk);
  block_scores(pr, o, bh, i0, nq, nk, s);
  for (int64_t r = 0; r < nq; ++r) {
    float* row = s + r * nk;
    const int64_t n = visible_keys(pr, i0 + r, nk);
    std::fill(row + n, row + nk, 0.0f);
    const float m = row_max(row, n);
    if (m == kNegInf) {  // a query that sees no key gets zeros and lse -inf, as in f32
      std::fill_n(row, n, 0.0f);
      lse[bh * pr.tq + i0 + r] = kNegInf;
      continue;
    }
    const float l = exp_row(row, n, m);
    const float inv = 1.0f / l;
    for (int64_t c = 0; c < n; ++c) row[c] *= inv;
    lse[bh * pr.tq + i0 + r] = m + std::log(l);
  }
  drop(pr, bh, i0, nq, 0, nk, s);  // after the normaliser, which counts every probability
  round_to_bf16_serial(s, p16, nq * nk);
  gemm({false, false, nq, pr.dv, nk, nk, pr.dv, pr.dv, 1.0f, false}, p16, o.at(o.v, bh * pr.tk * pr.dv), out);
}

struct Grads {
  const float *lse, *delta;
  float *dq, *dk, *dv;
};

void backward_block(const Problem& pr, const Operands16& o, const Grads& g, int64_t bh, int64_t i0) {
  const int64_t nq = std::min(kRows, pr.tq - i0), nk = pr.key_end(i0 + nq);
  float* dq = g.dq + (bh * pr.tq + i0) * pr.d;
  if (nk == 0) {
    std::fill_n(dq, nq * pr.d, 0.0f);
    return;
  }
  float *p = buffer<float>(0, nq * nk), *dp = buffer<float>(1, nq * nk);
  uint16_t* t16 = buffer<uint16_t>(0, nq * nk);
  block_scores(pr, o, bh, i0, nq, nk, p);
  for (int64_t r = 0; r < nq; ++r) {  // the forward's probabilities, recomputed from lse
    float* row = p + r * nk;
    const float lse = g.lse[bh * pr.tq + i0 + r];
    const int64_t n = lse == kNegInf ? 0 : visible_keys(pr, i0 + r, nk);
    std::fill(row + n, row + nk, 0.0f);
    if (n > 0) exp_row(row, n, lse);
  }
  const bool dropout = pr.p.dropout_p > 0.0f;
  if (dropout) {  // the probabilities as they multiplied v, rounded as the forward rounded them
    std::copy_n(p, nq * nk, dp);
    drop(pr, bh, i0, nq, 0, nk, dp);
    round_to_bf16_serial(dp, t16, nq * nk);
  } else {
    round_to_bf16_serial(p, t16, nq * nk);
  }
  const uint16_t* dy = o.at(o.dy, (bh * pr.tq + i0) * pr.dv);
  gemm({true, false, nk, pr.dv, nq, nk, pr.dv, pr.dv, 1.0f, true}, t16, dy, g.dv + bh * pr.tk * pr.dv);
  gemm({false, true, nq, nk, pr.dv, pr.dv, pr.dv, nk, 1.0f, false}, dy, o.at(o.v, bh * pr.tk * pr.dv), dp);
  if (dropout) drop(pr, bh, i0, nq, 0, nk, dp);  // the gradient reaches a probability through its mask
  for (int64_t r = 0; r < nq; ++r) {  // dS = P (dP - delta): the softmax's backward
    const float delta = g.delta[bh * pr.tq + i0 + r];
    for (int64_t c = 0; c < nk; ++c) dp[r * nk + c] = p[r * nk + c] * (dp[r * nk + c] - delta);
  }
  round_to_bf16_serial(dp, t16, nq * nk);
  gemm({false, false, nq, pr.d, nk, nk, pr.d, pr.d, pr.p.scale, false}, t16, o.at(o.k, bh * pr.tk * pr.d), dq);
  gemm({true, false, nk, pr.d, nq, nk, pr.d, pr.d, pr.p.scale, true}, t16, o.at(o.q, (bh * pr.tq + i0) * pr.d),
       g.dk + bh * pr.tk * pr.d);
}

}  // namespace

// Empty heads (d or dv 0) keep the f32 kernel: oneDNN's matmul is not asked for zero-sized products.
bool runs_in_bf16(const Ctx& ctx, const Problem& pr) {
  return computes_in_bf16(ctx) && pr.tk <= kMaxKeys && pr.d > 0 && pr.dv > 0;
}

void forward_bf16(Ctx& ctx, const Problem& pr, float* y, float* lse) {
  const Operands16 o = round_operands(ctx, pr, nullptr);
  const int64_t blocks = (pr.tq + kRows - 1) / kRows;
  RegionErrors errors;
#pragma omp parallel for schedule(dynamic)
  for (int64_t w = 0; w < pr.heads * blocks; ++w) {
    errors.run([&] { forward_block(pr, o, w / blocks, (w % blocks) * kRows, y, lse); });
  }
  errors.check("attention_forward", pr);
}

void backward_bf16(Ctx& ctx, const Problem& pr, const float* y, const float* dy, const float* lse, float* dq,
                   float* dk, float* dv) {
  const Operands16 o = round_operands(ctx, pr, dy);
  std::vector<float> delta(static_cast<size_t>(pr.heads * pr.tq));
  row_dots(pr, y, dy, delta.data());  // from the f32 y and dy, as in f32
  std::fill_n(dk, pr.heads * pr.tk * pr.d, 0.0f);
  std::fill_n(dv, pr.heads * pr.tk * pr.dv, 0.0f);
  const Grads g{lse, delta.data(), dq, dk, dv};
  const int64_t blocks = (pr.tq + kRows - 1) / kRows;
  RegionErrors errors;
  // One thread per head: it owns that head's dk and dv, which every query block adds to.
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < pr.heads; ++bh) {
    errors.run([&] {
      for (int64_t b = 0; b < blocks; ++b) backward_block(pr, o, g, bh, b * kRows);
    });
  }
  errors.check("attention_backward", pr);
}

}  // namespace tandem::backend::cpu::attention
