// Batch norm training, inference and backward (with and without the fused ReLU) against the
// double reference in both memory formats; running averages with the unbiased variance;
// gradients against finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

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
          {{2, 16, 5, 3}, false}, {{2, 16, 5, 3}, true},  // channels_last 16: the nChw16c kernels
          // channels_last multiples of 16: the AVX-512 kernels, one, two, three and 4 + 1 vectors a pixel
          {{2, 32, 3, 5}, false}, {{2, 32, 3, 5}, true}, {{3, 48, 2, 3}, true}, {{2, 80, 3, 3}, false},
          {{2, 80, 3, 3}, true}, {{3, 16, 9, 11}, true}, {{3, 32, 7, 9}, false}};  // several 64-pixel blocks
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest,
                         ::testing::Combine(::testing::ValuesIn(cases()),
                                            ::testing::Values(MemoryFormat::kContiguous,
                                                              MemoryFormat::kChannelsLast)));

// The variance is a mean square of deviations: a mean 3000 times the spread must not eat its digits
// (the AVX-512 kernels sum deviations from a value of the channel itself).
TEST(BatchNormStatisticsTest, VarianceKeepsItsDigitsWhenTheMeanIsFarFromZero) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  const Shape shape{4, 32, 6, 6};
  const auto n = static_cast<size_t>(shape.numel());
  Vec x = random_vec(n, 31, 2999.0, 3001.0), gamma(32, 1.0), beta(32, 0.0);
  for (MemoryFormat format : {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}) {
    Tensor rm = Tensor::zeros({32}), rv = Tensor::zeros({32});
    BatchNormForward f = batchnorm_forward_training(ctx, BatchNormParams{}, to_tensor(x, shape, format),
                                                    to_tensor(gamma, {32}), to_tensor(beta, {32}), rm, rv);
    BatchNormRef ref = batchnorm_ref(x, shape, gamma, beta, 1e-5, false);
    Vec invstd(32);
    for (size_t c = 0; c < 32; ++c) invstd[c] = 1.0 / std::sqrt(ref.var[c] + 1e-5);
    EXPECT_LT(rel_error(to_vec(f.saved.invstd), invstd), 1e-4) << memory_format_name(format);
    EXPECT_LT(rel_error(to_vec(f.y), ref.y), 1e-3) << memory_format_name(format);
  }
}

// relu(bn(x) + shortcut): against the double reference, and to the bit what batch norm followed by
// add_relu gives (a model may run either, as the backend or SyncBatchNorm decides).
class BatchNormAddReluTest : public ::testing::TestWithParam<std::tuple<Shape, MemoryFormat>> {};

TEST_P(BatchNormAddReluTest, MatchesReferenceAndTheUnfusedPairBitForBit) {
  const auto& [shape, format] = GetParam();
  ExecutionContext ctx(Device::cpu(), 2, 1);
  const auto n = static_cast<size_t>(shape.numel()), ch = static_cast<size_t>(shape[1]);
  Vec x = random_vec(n, 41, -2.0, 3.0), s = random_vec(n, 42), gamma = random_vec(ch, 43, 0.5, 1.5);
  Vec beta = random_vec(ch, 44), rm0 = random_vec(ch, 45), rv0 = random_vec(ch, 46, 0.5, 2.0);
  BatchNormParams p;
  p.momentum = 0.3f;
  Tensor tx = to_tensor(x, shape, format), ts = to_tensor(s, shape, format);
  Tensor tg = to_tensor(gamma, {shape[1]}), tb = to_tensor(beta, {shape[1]});
  Tensor rm_fused = to_tensor(rm0, {shape[1]}), rv_fused = to_tensor(rv0, {shape[1]});
  Tensor rm_pair = to_tensor(rm0, {shape[1]}), rv_pair = to_tensor(rv0, {shape[1]});

  BatchNormForward fused = batchnorm_add_relu_forward_training(ctx, p, tx, tg, tb, ts, rm_fused, rv_fused);
  BatchNormForward pair = batchnorm_forward_training(ctx, p, tx, tg, tb, rm_pair, rv_pair);
  Tensor pair_y = add_relu(ctx, pair.y, ts);

  Vec want = batchnorm_ref(x, shape, gamma, beta, p.eps, false).y;
  for (size_t i = 0; i < n; ++i) want[i] = std::max(want[i] + s[i], 0.0);
  EXPECT_EQ(fused.y.format(), format);
  EXPECT_LT(rel_error(to_vec(fused.y), want), 1e-4);
  ASSERT_EQ(fused.y.nbytes(), pair_y.nbytes());
  EXPECT_EQ(std::memcmp(fused.y.raw_data(), pair_y.raw_data(), fused.y.nbytes()), 0);
  EXPECT_EQ(to_vec(rm_fused), to_vec(rm_pair));
  EXPECT_EQ(to_vec(rv_fused), to_vec(rv_pair));
  EXPECT_EQ(to_vec(fused.saved.invstd), to_vec(pair.saved.invstd));
}

TEST(BatchNormAddReluErrors, AShortcutOfAnotherShapeOrFormatIsNamed) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  Tensor x = Tensor::zeros({2, 16, 3, 3}, DType::kF32, Device::cpu(), MemoryFormat::kChannelsLast);
  Tensor g = Tensor::zeros({16}), rm = Tensor::zeros({16}), rv = Tensor::zeros({16});
  expect_error([&] { batchnorm_add_relu_forward_training(ctx, {}, x, g, g, Tensor::zeros({2, 16, 3, 4}), rm, rv); },
               ErrorCode::kInvalidArgument, {"batchnorm_add_relu_forward_training", "shortcut", "[2, 16, 3, 4]"});
  expect_error([&] { batchnorm_add_relu_forward_training(ctx, {}, x, g, g, Tensor::zeros({2, 16, 3, 3}), rm, rv); },
               ErrorCode::kInvalidArgument, {"batchnorm_add_relu_forward_training", "shortcut", "channels_last"});
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormAddReluTest,
                         ::testing::Combine(::testing::Values(Shape{2, 16, 5, 3}, Shape{2, 80, 3, 3},
                                                              Shape{2, 19, 4, 4}),
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
