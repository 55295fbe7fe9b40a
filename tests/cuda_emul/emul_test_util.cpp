// The reference of scaled_dot_product_attention the emulated kernels are checked against, in
// double precision and written as plainly as the rules of attention_math.h allow: causal masks
// aligned bottom-right, dropout's keep decision by attention_math::kept, a normaliser that counts
// the dropped probabilities, and a query that sees no key gets y = 0 and lse = -inf.
#include "tests/cuda_emul/emul_test_util.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/backend/attention_math.h"

namespace tandem::emul_test {

uint16_t bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_round(float v) {
  const uint32_t u = uint32_t{bf16_bits(v)} << 16;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

AttnLayout Problem::layout() const {
  AttnLayout a{};
  a.heads = b * h;
  a.h = h;
  a.tq = tq;
  a.tk = tk;
  a.d = a.dv = d;
  a.mask = nullptr;
  a.scale = 1.0f / std::sqrt(static_cast<float>(d));
  a.causal = causal;
  a.dropout_p = dropout;
  a.keep_scale = dropout < 1.0f ? 1.0f / (1.0f - dropout) : 0.0f;
  a.seed = seed;
  if (packed) {
    // As packed_attn_layout (cuda_attention_dispatch.cu) builds them for qkv (B, T, 3 H D).
    const int64_t c = h * d;
    a.qs = a.ks = a.vs = {3 * tq * c, d, 3 * c};
    a.ys = {tq * c, d, c};
  } else {
    // As attn_layout builds them for (B, H, T, D) tensors.
    a.qs = {h * tq * d, tq * d, d};
    a.ks = a.vs = {h * tk * d, tk * d, d};
    a.ys = {h * tq * d, tq * d, d};
  }
  return a;
}

size_t Problem::q_elements() const { return static_cast<size_t>(packed ? b * tq * 3 * h * d : b * h * tq * d); }
size_t Problem::kv_elements() const { return packed ? 0 : static_cast<size_t>(b * h * tk * d); }
size_t Problem::y_elements() const { return static_cast<size_t>(b * h * tq * d); }

std::string Problem::name() const {
  return "D" + std::to_string(d) + "_Tq" + std::to_string(tq) + "_Tk" + std::to_string(tk) +
         (causal ? "_causal" : "_full") + (dropout > 0.0f ? "_dropout" : "_nodrop") + (packed ? "_packed" : "_bhtd") +
         (scores == Scores::kNegative     ? "_tailprobe"
          : scores == Scores::kIncreasing ? "_causalprobe"
                                          : "");
}

Inputs make_inputs(const Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  auto fill = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = bf16_round(u(rng));
    return v;
  };
  Inputs in;
  in.q = fill(p.q_elements());
  in.k = fill(p.kv_elements());
  in.v = fill(p.kv_elements());
  in.dy = fill(p.y_elements());
  if (p.scores == Scores::kRandom) return in;
  // q near (1, ..., 1); k near -(1, ..., 1), or rising from -(1, ...) to (1, ...) with the key index.
  const AttnLayout a = p.layout();
  auto set = [&](std::vector<float>& store, int64_t offset, const HeadStrides& s, int64_t rows, auto value) {
    for (int64_t bh = 0; bh < a.heads; ++bh) {
      for (int64_t i = 0; i < rows; ++i) {
        float* row = store.data() + offset + backend::cuda::head_row(s, a.h, bh, i);
        for (int64_t c = 0; c < a.d; ++c) row[c] = bf16_round(value(i) + 0.125f * u(rng));
      }
    }
  };
  set(in.q, 0, a.qs, a.tq, [](int64_t) { return 1.0f; });
  const auto key = [&](int64_t j) {
    return p.scores == Scores::kNegative ? -1.0f : 2.0f * static_cast<float>(j) / static_cast<float>(a.tk - 1) - 1.0f;
  };
  set(p.packed ? in.q : in.k, p.k_offset(), a.ks, a.tk, key);
  return in;
}

namespace {

// Row i of head bh of a strided operand, as a pointer into its storage.
struct View {
  const float* base;
  HeadStrides s;
  int64_t h;
  const float* row(int64_t bh, int64_t i) const { return base + backend::cuda::head_row(s, h, bh, i); }
};

double dot(const float* x, const float* y, int64_t n) {
  double s = 0.0;
  for (int64_t c = 0; c < n; ++c) s += static_cast<double>(x[c]) * y[c];
  return s;
}

}  // namespace

Outputs reference(const Problem& p, const Inputs& in) {
  const AttnLayout a = p.layout();
  const View q{in.q.data(), a.qs, a.h};
  const View k{(p.packed ? in.q.data() + p.k_offset() : in.k.data()), a.ks, a.h};
  const View v{(p.packed ? in.q.data() + p.v_offset() : in.v.data()), a.vs, a.h};
  const View dy{in.dy.data(), a.ys, a.h};
  Outputs out;
  out.y.assign(p.y_elements(), 0.0f);
  out.lse.assign(static_cast<size_t>(a.heads * a.tq), 0.0f);
  out.delta.assign(static_cast<size_t>(a.heads * a.tq), 0.0f);
  out.dq.assign(p.q_elements(), 0.0f);
  out.dk.assign(p.kv_elements(), 0.0f);
  out.dv.assign(p.kv_elements(), 0.0f);
  auto grad = [&](std::vector<float>& g_store, int64_t offset, const HeadStrides& s, int64_t bh, int64_t i) {
    std::vector<float>& store = p.packed ? out.dq : g_store;
    return store.data() + offset + backend::cuda::head_row(s, a.h, bh, i);
  };
  const double scale = a.scale;
  const int64_t d = a.d;
  std::vector<double> dk_acc(static_cast<size_t>(a.tk * d)), dv_acc(static_cast<size_t>(a.tk * d));
  for (int64_t bh = 0; bh < a.heads; ++bh) {
    std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
    std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
    for (int64_t i = 0; i < a.tq; ++i) {
      const int64_t last =
          a.causal ? std::min(a.tk - 1, backend::attention_math::last_visible_key(i, a.tq, a.tk)) : a.tk - 1;
      float* y_row = out.y.data() + backend::cuda::head_row(a.ys, a.h, bh, i);
      float* dq_row = grad(out.dq, 0, a.qs, bh, i);
      if (last < 0) {  // sees no key: y = 0, lse = -inf, no gradient
        out.lse[static_cast<size_t>(bh * a.tq + i)] = -std::numeric_limits<float>::infinity();
        continue;
      }
      const auto n = static_cast<size_t>(last + 1);
      std::vector<double> s(n), prob(n), z(n), dp(n);
      double m = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < n; ++j) {
        s[j] = scale * dot(q.row(bh, i), k.row(bh, static_cast<int64_t>(j)), d);
        m = std::max(m, s[j]);
      }
      double l = 0.0;
      for (size_t j = 0; j < n; ++j) l += std::exp(s[j] - m);
      std::vector<double> y(static_cast<size_t>(d), 0.0);
      for (size_t j = 0; j < n; ++j) {
        prob[j] = std::exp(s[j] - m) / l;
        const bool keep = a.dropout_p <= 0.0f || backend::attention_math::kept(a.seed, a.dropout_p, bh, i,
                                                                               static_cast<int64_t>(j), a.tq, a.tk);
        z[j] = keep ? (a.dropout_p > 0.0f ? static_cast<double>(a.keep_scale) : 1.0) : 0.0;
        const float* v_row = v.row(bh, static_cast<int64_t>(j));
        for (int64_t c = 0; c < d; ++c) y[static_cast<size_t>(c)] += prob[j] * z[j] * v_row[c];
      }
      for (int64_t c = 0; c < d; ++c) y_row[c] = static_cast<float>(y[static_cast<size_t>(c)]);
      out.lse[static_cast<size_t>(bh * a.tq + i)] = static_cast<float>(m + std::log(l));
      // Backward: delta = dy . y, dS = P (z dP - delta), dq = scale dS K, dk = scale dS^T Q, dv = (P z)^T dy.
      const float* dy_row = dy.row(bh, i);
      double delta = 0.0;
      for (int64_t c = 0; c < d; ++c) delta += dy_row[c] * y[static_cast<size_t>(c)];
      out.delta[static_cast<size_t>(bh * a.tq + i)] = static_cast<float>(delta);
      std::vector<double> dq(static_cast<size_t>(d), 0.0);
      for (size_t j = 0; j < n; ++j) {
        const auto jj = static_cast<int64_t>(j);
        const double ds = prob[j] * (z[j] * dot(dy_row, v.row(bh, jj), d) - delta);
        const float* k_row = k.row(bh, jj);
        const float* q_row = q.row(bh, i);
        for (int64_t c = 0; c < d; ++c) {
          dq[static_cast<size_t>(c)] += ds * k_row[c];
          dk_acc[static_cast<size_t>(jj * d + c)] += ds * q_row[c];
          dv_acc[static_cast<size_t>(jj * d + c)] += prob[j] * z[j] * dy_row[c];
        }
      }
      for (int64_t c = 0; c < d; ++c) dq_row[c] = static_cast<float>(scale * dq[static_cast<size_t>(c)]);
    }
    for (int64_t j = 0; j < a.tk; ++j) {
      float* dk_row = grad(out.dk, p.k_offset(), a.ks, bh, j);
      float* dv_row = grad(out.dv, p.v_offset(), a.vs, bh, j);
      for (int64_t c = 0; c < d; ++c) {
        dk_row[c] = static_cast<float>(scale * dk_acc[static_cast<size_t>(j * d + c)]);
        dv_row[c] = static_cast<float>(dv_acc[static_cast<size_t>(j * d + c)]);
      }
    }
  }
  return out;
}

double layout_error(const std::vector<float>& got, const std::vector<float>& want, const HeadStrides& s, int64_t heads,
                    int64_t h, int64_t rows, int64_t cols, int64_t base) {
  double max_err = 0.0, max_want = 0.0;
  for (int64_t bh = 0; bh < heads; ++bh) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t row = base + backend::cuda::head_row(s, h, bh, i);
      for (int64_t c = 0; c < cols; ++c) {
        const auto e = static_cast<size_t>(row + c);
        const double g = got.at(e), w = want.at(e);
        if (!std::isfinite(g)) return std::numeric_limits<double>::infinity();  // NaN: never written
        max_err = std::max(max_err, std::abs(g - w));
        max_want = std::max(max_want, std::abs(w));
      }
    }
  }
  return max_want > 0.0 ? max_err / max_want : max_err;
}

double row_error(const std::vector<float>& got, const std::vector<float>& want) {
  double max_err = 0.0, max_want = 0.0;
  for (size_t e = 0; e < want.size(); ++e) {
    if (std::isinf(want[e]) || std::isinf(got.at(e))) {
      if (got[e] != want[e]) return std::numeric_limits<double>::infinity();
      continue;
    }
    if (std::isnan(got[e])) return std::numeric_limits<double>::infinity();
    max_err = std::max(max_err, std::abs(static_cast<double>(got[e]) - want[e]));
    max_want = std::max(max_want, std::abs(static_cast<double>(want[e])));
  }
  return max_want > 0.0 ? max_err / max_want : max_err;
}

}  // namespace tandem::emul_test
