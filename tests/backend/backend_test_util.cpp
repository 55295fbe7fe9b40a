// Helpers and double-precision reference kernels of the backend tests.
#include "backend_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace tandem::backend::testing {

Vec random_vec(size_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = static_cast<float>(dist(gen));
  return v;
}

Tensor to_tensor(const Vec& v, const Shape& shape, MemoryFormat format) {
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from_vector(f, shape).to_format(format);
}

Vec to_vec(const Tensor& t) {
  std::vector<float> f = t.to_vector();
  return Vec(f.begin(), f.end());
}

double rel_error(const Vec& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return diff / std::max(scale, 1e-30);
}

double rel_norm_error(const Vec& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Vec fd_gradient(const std::function<Vec(const Vec&)>& f, const Vec& x, const Vec& r, double h) {
  Vec g(x.size());
  Vec xp = x;
  for (size_t i = 0; i < x.size(); ++i) {
    xp[i] = x[i] + h;
    double up = dot(r, f(xp));
    xp[i] = x[i] - h;
    double down = dot(r, f(xp));
    xp[i] = x[i];
    g[i] = (up - down) / (2.0 * h);
  }
  return g;
}

int64_t numel(const Shape& s) { return s.numel(); }

namespace {

// Calls visit(n, k, c, p, q, r, s, h, w) for every term of the convolution sum whose input
// position (h, w) lies inside x; c is the input channel.
template <typename Visit>
void for_each_conv_term(const Conv2dParams& pr, const Shape& xs, const Shape& ws, Visit visit) {
  Shape ys = conv2d_output_shape(pr, xs, ws);
  int64_t cg = ws[1], kg = ws[0] / pr.groups;
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t k = 0; k < ws[0]; ++k)
      for (int64_t p = 0; p < ys[2]; ++p)
        for (int64_t q = 0; q < ys[3]; ++q)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t r = 0; r < ws[2]; ++r)
              for (int64_t s = 0; s < ws[3]; ++s) {
                int64_t h = p * pr.stride[0] - pr.padding[0] + r * pr.dilation[0];
                int64_t w = q * pr.stride[1] - pr.padding[1] + s * pr.dilation[1];
                if (h < 0 || h >= xs[2] || w < 0 || w >= xs[3]) continue;
                int64_t c = (k / kg) * cg + ci;
                visit(((n * xs[1] + c) * xs[2] + h) * xs[3] + w, ((k * cg + ci) * ws[2] + r) * ws[3] + s,
                      ((n * ys[1] + k) * ys[2] + p) * ys[3] + q);
              }
}

}  // namespace

Vec conv2d_ref(const Conv2dParams& p, const Vec& x, const Shape& xs, const Vec& w, const Shape& ws, const Vec& b) {
  Shape ys = conv2d_output_shape(p, xs, ws);
  Vec y(static_cast<size_t>(ys.numel()), 0.0);
  for_each_conv_term(p, xs, ws, [&](int64_t xi, int64_t wi, int64_t yi) {
    y[static_cast<size_t>(yi)] += x[static_cast<size_t>(xi)] * w[static_cast<size_t>(wi)];
  });
  if (!b.empty()) {
    int64_t plane = ys[2] * ys[3];
    for (size_t i = 0; i < y.size(); ++i) y[i] += b[static_cast<size_t>((static_cast<int64_t>(i) / plane) % ys[1])];
  }
  return y;
}

Vec conv2d_backward_data_ref(const Conv2dParams& p, const Vec& dy, const Vec& w, const Shape& ws, const Shape& xs) {
  Vec dx(static_cast<size_t>(xs.numel()), 0.0);
  for_each_conv_term(p, xs, ws, [&](int64_t xi, int64_t wi, int64_t yi) {
    dx[static_cast<size_t>(xi)] += dy[static_cast<size_t>(yi)] * w[static_cast<size_t>(wi)];
  });
  return dx;
}

Vec conv2d_backward_weights_ref(const Conv2dParams& p, const Vec& x, const Shape& xs, const Vec& dy,
                                const Shape& ws) {
  Vec dw(static_cast<size_t>(ws.numel()), 0.0);
  for_each_conv_term(p, xs, ws, [&](int64_t xi, int64_t wi, int64_t yi) {
    dw[static_cast<size_t>(wi)] += dy[static_cast<size_t>(yi)] * x[static_cast<size_t>(xi)];
  });
  return dw;
}

namespace {

// Calls visit(yi, xi, in_bounds) for each position of each pooling window; xi is -1 in padding.
template <typename Visit>
void for_each_pool_term(const Pool2dParams& pr, const Shape& xs, Visit visit) {
  Shape ys = pool2d_output_shape(pr, xs);
  for (int64_t nc = 0; nc < xs[0] * xs[1]; ++nc)
    for (int64_t p = 0; p < ys[2]; ++p)
      for (int64_t q = 0; q < ys[3]; ++q)
        for (int64_t r = 0; r < pr.kernel[0]; ++r)
          for (int64_t s = 0; s < pr.kernel[1]; ++s) {
            int64_t h = p * pr.stride[0] - pr.padding[0] + r;
            int64_t w = q * pr.stride[1] - pr.padding[1] + s;
            bool inside = h >= 0 && h < xs[2] && w >= 0 && w < xs[3];
            visit((nc * ys[2] + p) * ys[3] + q, inside ? (nc * xs[2] + h) * xs[3] + w : int64_t{-1});
          }
}

// The index in x of each output's maximum.
std::vector<int64_t> argmax_pool(const Pool2dParams& p, const Vec& x, const Shape& xs) {
  Shape ys = pool2d_output_shape(p, xs);
  std::vector<int64_t> arg(static_cast<size_t>(ys.numel()), -1);
  for_each_pool_term(p, xs, [&](int64_t yi, int64_t xi) {
    auto& a = arg[static_cast<size_t>(yi)];
    if (xi >= 0 && (a < 0 || x[static_cast<size_t>(xi)] > x[static_cast<size_t>(a)])) a = xi;
  });
  return arg;
}

// The divisor of each output window.
Vec pool_counts(const Pool2dParams& p, const Shape& xs) {
  Vec count(static_cast<size_t>(pool2d_output_shape(p, xs).numel()), 0.0);
  for_each_pool_term(p, xs, [&](int64_t yi, int64_t xi) {
    if (xi >= 0 || p.count_include_pad) count[static_cast<size_t>(yi)] += 1.0;
  });
  return count;
}

}  // namespace

Vec max_pool_ref(const Pool2dParams& p, const Vec& x, const Shape& xs) {
  std::vector<int64_t> arg = argmax_pool(p, x, xs);
  Vec y(arg.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = x[static_cast<size_t>(arg[i])];
  return y;
}

Vec max_pool_backward_ref(const Pool2dParams& p, const Vec& x, const Shape& xs, const Vec& dy) {
  std::vector<int64_t> arg = argmax_pool(p, x, xs);
  Vec dx(x.size(), 0.0);
  for (size_t i = 0; i < arg.size(); ++i) dx[static_cast<size_t>(arg[i])] += dy[i];
  return dx;
}

Vec avg_pool_ref(const Pool2dParams& p, const Vec& x, const Shape& xs) {
  Vec count = pool_counts(p, xs);
  Vec y(count.size(), 0.0);
  for_each_pool_term(p, xs, [&](int64_t yi, int64_t xi) {
    if (xi >= 0) y[static_cast<size_t>(yi)] += x[static_cast<size_t>(xi)];
  });
  for (size_t i = 0; i < y.size(); ++i) y[i] /= count[i];
  return y;
}

Vec avg_pool_backward_ref(const Pool2dParams& p, const Vec& dy, const Shape& xs) {
  Vec count = pool_counts(p, xs);
  Vec dx(static_cast<size_t>(xs.numel()), 0.0);
  for_each_pool_term(p, xs, [&](int64_t yi, int64_t xi) {
    if (xi >= 0) dx[static_cast<size_t>(xi)] += dy[static_cast<size_t>(yi)] / count[static_cast<size_t>(yi)];
  });
  return dx;
}

namespace {

size_t channel_of(size_t i, const Shape& xs) {
  return static_cast<size_t>((static_cast<int64_t>(i) / (xs[2] * xs[3])) % xs[1]);
}

}  // namespace

BatchNormRef batchnorm_ref(const Vec& x, const Shape& xs, const Vec& gamma, const Vec& beta, double eps, bool relu) {
  size_t c_count = static_cast<size_t>(xs[1]);
  double m = static_cast<double>(xs.numel() / xs[1]);
  BatchNormRef out{Vec(x.size()), Vec(c_count, 0.0), Vec(c_count, 0.0)};
  for (size_t i = 0; i < x.size(); ++i) out.mean[channel_of(i, xs)] += x[i] / m;
  for (size_t i = 0; i < x.size(); ++i) {
    double d = x[i] - out.mean[channel_of(i, xs)];
    out.var[channel_of(i, xs)] += d * d / m;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    size_t c = channel_of(i, xs);
    double y = gamma[c] * (x[i] - out.mean[c]) / std::sqrt(out.var[c] + eps) + beta[c];
    out.y[i] = relu ? std::max(y, 0.0) : y;
  }
  return out;
}

BatchNormGradsRef batchnorm_backward_ref(const Vec& x, const Shape& xs, const Vec& gamma, const Vec& beta,
                                         const Vec& dy, double eps, bool relu) {
  BatchNormRef f = batchnorm_ref(x, xs, gamma, beta, eps, relu);
  size_t c_count = static_cast<size_t>(xs[1]);
  double m = static_cast<double>(xs.numel() / xs[1]);
  BatchNormGradsRef g{Vec(x.size()), Vec(c_count, 0.0), Vec(c_count, 0.0)};
  Vec g_masked(dy.size()), xhat(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    size_t c = channel_of(i, xs);
    g_masked[i] = relu && f.y[i] <= 0.0 ? 0.0 : dy[i];
    xhat[i] = (x[i] - f.mean[c]) / std::sqrt(f.var[c] + eps);
    g.dbeta[c] += g_masked[i];
    g.dgamma[c] += g_masked[i] * xhat[i];
  }
  for (size_t i = 0; i < x.size(); ++i) {
    size_t c = channel_of(i, xs);
    double invstd = 1.0 / std::sqrt(f.var[c] + eps);
    g.dx[i] = gamma[c] * invstd * (g_masked[i] - g.dbeta[c] / m - xhat[i] * g.dgamma[c] / m);
  }
  return g;
}

Vec matmul_ref(const Vec& a, const Vec& b, int64_t m, int64_t k, int64_t n) {
  Vec c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l)
        c[static_cast<size_t>(i * n + j)] += a[static_cast<size_t>(i * k + l)] * b[static_cast<size_t>(l * n + j)];
  return c;
}

Vec transpose(const Vec& a, int64_t rows, int64_t cols) {
  Vec t(a.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[static_cast<size_t>(j * rows + i)] = a[static_cast<size_t>(i * cols + j)];
  return t;
}

SoftmaxRef softmax_cross_entropy_ref(const Vec& logits, const std::vector<int64_t>& labels, int64_t k, double s) {
  size_t rows = labels.size();
  SoftmaxRef out{Vec(rows), Vec(logits.size())};
  for (size_t i = 0; i < rows; ++i) {
    const double* z = logits.data() + i * static_cast<size_t>(k);
    double m = *std::max_element(z, z + k);
    double se = 0.0;
    for (int64_t j = 0; j < k; ++j) se += std::exp(z[j] - m);
    double lse = m + std::log(se);
    double loss = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      double target = s / static_cast<double>(k) + (j == labels[i] ? 1.0 - s : 0.0);
      loss -= target * (z[j] - lse);
      out.probs[i * static_cast<size_t>(k) + static_cast<size_t>(j)] = std::exp(z[j] - lse);
    }
    out.loss[i] = loss;
  }
  return out;
}

void expect_error(const std::function<void()>& f, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing " << ::testing::PrintToString(parts);
  } catch (const Error& e) {
    EXPECT_EQ(error_code_name(e.code()), error_code_name(code)) << e.what();
    for (const std::string& part : parts) EXPECT_THAT(e.what(), ::testing::HasSubstr(part));
  }
}

}  // namespace tandem::backend::testing
