#include "tests/backend/nd_ref_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "engine/backend/attention_math.h"

namespace tandem::backend::testing {

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(static_cast<size_t>(s.rank()), 1);
  for (int d = s.rank() - 2; d >= 0; --d) st[static_cast<size_t>(d)] = st[static_cast<size_t>(d + 1)] * s[d + 1];
  return st;
}

namespace {

// The multi-index of flat position i in shape s.
std::vector<int64_t> index_of(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(static_cast<size_t>(s.rank()));
  for (int d = s.rank() - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = s[d] > 0 ? i % s[d] : 0;
    i = s[d] > 0 ? i / s[d] : 0;
  }
  return idx;
}

}  // namespace

Vec permute_ref(const Vec& x, const Shape& xs, const std::vector<int>& perm) {
  std::vector<int64_t> dims;
  for (int p : perm) dims.push_back(xs[p]);
  const Shape ys(dims);
  const std::vector<int64_t> xst = strides_of(xs);
  Vec y(static_cast<size_t>(ys.numel()));
  for (int64_t i = 0; i < ys.numel(); ++i) {
    const std::vector<int64_t> idx = index_of(i, ys);
    int64_t off = 0;
    for (size_t d = 0; d < perm.size(); ++d) off += idx[d] * xst[static_cast<size_t>(perm[d])];
    y[static_cast<size_t>(i)] = x[static_cast<size_t>(off)];
  }
  return y;
}

Vec expand_ref(const Vec& x, const Shape& xs, const Shape& out) {
  const std::vector<int64_t> xst = strides_of(xs);
  Vec y(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    const std::vector<int64_t> idx = index_of(i, out);
    int64_t off = 0;
    for (int d = 0; d < xs.rank(); ++d) {
      const int od = d + out.rank() - xs.rank();
      off += (xs[d] == 1 ? 0 : idx[static_cast<size_t>(od)]) * xst[static_cast<size_t>(d)];
    }
    y[static_cast<size_t>(i)] = x[static_cast<size_t>(off)];
  }
  return y;
}

double binary_ref(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
  }
  return 0.0;
}

namespace {

double gelu_tanh(double x) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

}  // namespace

double unary_ref(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::kExp: return std::exp(x);
    case UnaryOp::kLog: return std::log(x);
    case UnaryOp::kSqrt: return std::sqrt(x);
    case UnaryOp::kRsqrt: return 1.0 / std::sqrt(x);
    case UnaryOp::kTanh: return std::tanh(x);
    case UnaryOp::kGeluErf: return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
    case UnaryOp::kGeluTanh: return gelu_tanh(x);
    case UnaryOp::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::kSilu: return x / (1.0 + std::exp(-x));
    case UnaryOp::kAbs: return std::abs(x);
    case UnaryOp::kSin: return std::sin(x);
    case UnaryOp::kCos: return std::cos(x);
  }
  return 0.0;
}

double unary_grad_ref(UnaryOp op, double x) {
  const double h = 1e-6;
  return (unary_ref(op, x + h) - unary_ref(op, x - h)) / (2 * h);
}

Vec reduce_ref(Reduction r, const Vec& x, const Shape& xs, int axis) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= xs[d];
  for (int d = axis + 1; d < xs.rank(); ++d) inner *= xs[d];
  const int64_t n = xs[axis];
  Vec y(static_cast<size_t>(outer * inner));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double acc = r == Reduction::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t k = 0; k < n; ++k) {
        const double v = x[static_cast<size_t>((o * n + k) * inner + i)];
        acc = r == Reduction::kMax ? std::max(acc, v) : acc + v;
      }
      y[static_cast<size_t>(o * inner + i)] = r == Reduction::kMean ? acc / static_cast<double>(n) : acc;
    }
  }
  return y;
}

Vec softmax_ref(const Vec& x, const Shape& xs, int axis, bool log) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= xs[d];
  for (int d = axis + 1; d < xs.rank(); ++d) inner *= xs[d];
  const int64_t n = xs[axis];
  Vec y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return static_cast<size_t>((o * n + k) * inner + i); };
      double m = -std::numeric_limits<double>::infinity(), s = 0.0;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, x[at(k)]);
      for (int64_t k = 0; k < n; ++k) s += std::exp(x[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) y[at(k)] = log ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s;
    }
  }
  return y;
}

Vec layer_norm_ref(const Vec& x, int64_t rows, int64_t n, const Vec& gamma, const Vec& beta, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t j = 0; j < n; ++j) mean += x[static_cast<size_t>(r * n + j)];
    mean /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) var += std::pow(x[static_cast<size_t>(r * n + j)] - mean, 2);
    var /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) {
      double v = (x[static_cast<size_t>(r * n + j)] - mean) / std::sqrt(var + eps);
      if (!gamma.empty()) v *= gamma[static_cast<size_t>(j)];
      if (!beta.empty()) v += beta[static_cast<size_t>(j)];
      y[static_cast<size_t>(r * n + j)] = v;
    }
  }
  return y;
}

Vec attention_ref(const AttentionShape& s, const Vec& q, const Vec& k, const Vec& v, const Vec& mask, double scale,
                  bool causal) {
  Vec y(static_cast<size_t>(s.b * s.h * s.tq * s.dv), 0.0);
  std::vector<double> p(static_cast<size_t>(s.tk));
  for (int64_t bh = 0; bh < s.b * s.h; ++bh) {
    for (int64_t i = 0; i < s.tq; ++i) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < s.tk; ++j) {
        double score = 0.0;
        for (int64_t c = 0; c < s.d; ++c) {
          score += q[static_cast<size_t>((bh * s.tq + i) * s.d + c)] * k[static_cast<size_t>((bh * s.tk + j) * s.d + c)];
        }
        score *= scale;
        if (!mask.empty()) score += mask[static_cast<size_t>((bh * s.tq + i) * s.tk + j)];
        if (causal && j > attention_math::last_visible_key(i, s.tq, s.tk)) score = -std::numeric_limits<double>::infinity();
        p[static_cast<size_t>(j)] = score;
        m = std::max(m, score);
      }
      if (m == -std::numeric_limits<double>::infinity()) continue;  // no visible key: zeros
      double sum = 0.0;
      for (double& e : p) sum += (e = std::exp(e - m));
      for (int64_t j = 0; j < s.tk; ++j) {
        for (int64_t c = 0; c < s.dv; ++c) {
          y[static_cast<size_t>((bh * s.tq + i) * s.dv + c)] +=
              p[static_cast<size_t>(j)] / sum * v[static_cast<size_t>((bh * s.tk + j) * s.dv + c)];
        }
      }
    }
  }
  return y;
}

}  // namespace tandem::backend::testing
