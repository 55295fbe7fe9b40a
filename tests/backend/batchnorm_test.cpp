// Batch norm training, inference and backward (with and without the fused ReLU) against the
// double reference in both memory formats; running averages with the unbiased variance;
// gradients against finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "backend_test_util.h"

namespace tandem::backend::testing {
namespace {

struct BnCase {
  Shape x;
  bool relu;
};

class BatchNormTest : public ::testing::TestWithParam<std::tuple<BnCase, MemoryFormat>> {
 protected:
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_P(BatchNormTest, TrainingInferenceAndBackwardMatchReference) {
  const auto& [c, format] = GetParam();
  size_t n = static_cast<size_t>(c.x.numel()), ch = static_cast<size_t>(c.x[1]);
  Vec x = random_vec(n, 1, -2.0, 3.0), gamma = random_vec(ch, 2, 0.5, 1.5), beta = random_vec(ch, 3);
  Vec dy = random_vec(n, 4), rm0 = random_vec(ch, 5), rv0 = random_vec(ch, 6, 0.5, 2.0);
  BatchNormParams p;
  p.eps = 1e-3f;
  p.momentum = 0.2f;
  p.fuse_relu = c.relu;
  Tensor tx = to_tensor(x, c.x, format), tg = to_tensor(gamma, {c.x[1]}), tb = to_tensor(beta, {c.x[1]});
  Tensor rm = to_tensor(rm0, {c.x[1]}), rv = to_tensor(rv0, {c.x[1]});

  BatchNormForward f = batchnorm_forward_training(ctx_, p, tx, tg, tb, rm, rv);
  BatchNormRef ref = batchnorm_ref(x, c.x, gamma, beta, p.eps, c.relu);
  EXPECT_EQ(f.y.format(), format);
  EXPECT_LT(rel_error(to_vec(f.y), ref.y), 1e-4);
  EXPECT_LT(rel_error(to_vec(f.saved.mean), ref.mean), 1e-4);
  Vec invstd(ch), want_rm(ch), want_rv(ch);
  double m = static_cast<double>(c.x.numel() / c.x[1]);
  for (size_t i = 0; i < ch; ++i) {
    invstd[i] = 1.0 / std::sqrt(ref.var[i] + p.eps);
    want_rm[i] = (1 - 0.2) * rm0[i] + 0.2 * ref.mean[i];
    want_rv[i] = (1 - 0.2) * rv0[i] + 0.2 * ref.var[i] * m / (m - 1);  // unbiased, as PyTorch
  }
  EXPECT_LT(rel_error(to_vec(f.saved.invstd), invstd), 1e-4);
  EXPECT_LT(rel_error(to_vec(rm), want_rm), 1e-4);
  EXPECT_LT(rel_error(to_vec(rv), want_rv), 1e-4);

  BatchNormGrads g = batchnorm_backward(ctx_, p, tx, f.y, to_tensor(dy, c.x, format), tg, f.saved);
  BatchNormGradsRef gref = batchnorm_backward_ref(x, c.x, gamma, beta, dy, p.eps, c.relu);
  EXPECT_LT(rel_error(to_vec(g.dx), gref.dx), 1e-4);
  EXPECT_LT(rel_error(to_vec(g.dgamma), gref.dgamma), 1e-4);
  EXPECT_LT(rel_error(to_vec(g.dbeta), gref.dbeta), 1e-4);

  // Inference with the running statistics just updated.
  Tensor yi = batchnorm_forward_inference(ctx_, p, tx, tg, tb, rm, rv);
  Vec want(n);
  for (size_t i = 0; i < n; ++i) {
    size_t k = static_cast<size_t>((static_cast<int64_t>(i) / (c.x[2] * c.x[3])) % c.x[1]);
    double v = gamma[k] * (x[i] - want_rm[k]) / std::sqrt(want_rv[k] + p.eps) + beta[k];
    want[i] = c.relu ? std::max(v, 0.0) : v;
  }
  EXPECT_LT(rel_error(to_vec(yi), want), 1e-4);
}

std::vector<BnCase> cases() {
  return {{{2, 3, 5, 7}, false}, {{1, 4, 3, 3}, true}, {{4, 8, 6, 5}, true}, {{3, 16, 1, 1}, false},
          {{2, 19, 4, 4}, false}, {{2, 19, 4, 4}, true},
          {{2, 16, 5, 3}, false}, {{2, 16, 5, 3}, true}};  // channels_last 16: the nChw16c kernels
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest,
                         ::testing::Combine(::testing::ValuesIn(cases()),
                                            ::testing::Values(MemoryFormat::kContiguous,
                                                              MemoryFormat::kChannelsLast)));

class BatchNormGradientTest : public ::testing::TestWithParam<std::tuple<BnCase, MemoryFormat>> {};

TEST_P(BatchNormGradientTest, MatchesFiniteDifferences) {
  const auto& [c, format] = GetParam();
  ExecutionContext ctx(Device::cpu(), 2, 1);
  size_t n = static_cast<size_t>(c.x.numel()), ch = static_cast<size_t>(c.x[1]);
  Vec x = random_vec(n, 21, -2.0, 3.0), gamma = random_vec(ch, 22, 0.5, 1.5), beta = random_vec(ch, 23);
  Vec r = random_vec(n, 24);
  BatchNormParams p;
  p.fuse_relu = c.relu;
  auto forward = [&](const Vec& xv, const Vec& gv, const Vec& bv) {
    return batchnorm_ref(xv, c.x, gv, bv, p.eps, c.relu).y;
  };
  Vec fd_x = fd_gradient([&](const Vec& v) { return forward(v, gamma, beta); }, x, r);
  Vec fd_g = fd_gradient([&](const Vec& v) { return forward(x, v, beta); }, gamma, r);
  Vec fd_b = fd_gradient([&](const Vec& v) { return forward(x, gamma, v); }, beta, r);

  Tensor tx = to_tensor(x, c.x, format), tg = to_tensor(gamma, {c.x[1]});
  Tensor rm = Tensor::zeros({c.x[1]}), rv = Tensor::zeros({c.x[1]});
  BatchNormForward f = batchnorm_forward_training(ctx, p, tx, tg, to_tensor(beta, {c.x[1]}), rm, rv);
  BatchNormGrads g = batchnorm_backward(ctx, p, tx, f.y, to_tensor(r, c.x, format), tg, f.saved);
  EXPECT_LT(rel_norm_error(to_vec(g.dx), fd_x), 1e-3);
  EXPECT_LT(rel_norm_error(to_vec(g.dgamma), fd_g), 1e-3);
  EXPECT_LT(rel_norm_error(to_vec(g.dbeta), fd_b), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormGradientTest,
                         ::testing::Combine(::testing::Values(BnCase{{2, 3, 4, 5}, false}, BnCase{{3, 2, 3, 3}, true}),
                                            ::testing::Values(MemoryFormat::kContiguous,
                                                              MemoryFormat::kChannelsLast)));

}  // namespace
}  // namespace tandem::backend::testing
