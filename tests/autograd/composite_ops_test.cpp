// The composite ops (composite.h: stack, var/std, tril/triu, the MSE, L1, smooth L1, Huber and BCE
// losses) against double references written from PyTorch's definitions,
// their gradients against central differences (check_gradients), and their errors. BCE with logits
// is also held to its closed-form gradient at logits of exactly 0, where a chain through relu and
// abs would give -y instead of 0.5 - y.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd/composite.h"
#include "engine/autograd/gradcheck.h"
#include "tests/autograd/autograd_test_util.h"

namespace tandem::autograd {
namespace {

using tandem::testing::random_tensor;

using CompositeOpsTest = tandem::testing::OpTest;

TEST_F(CompositeOpsTest, StackInsertsTheNewDimensionWhereAsked) {
  const Tensor a = random_tensor({2, 3}, 1), b = random_tensor({2, 3}, 2);
  const std::vector<float> av = a.to_vector(), bv = b.to_vector();
  const Variable parts[] = {Variable(a), Variable(b)};
  Variable s0 = stack(ctx_, parts, 0), s1 = stack(ctx_, parts, 1), last = stack(ctx_, parts, -1);
  EXPECT_EQ(s0.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(s1.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(last.shape(), (Shape{2, 3, 2}));
  const std::vector<float> v0 = s0.value().to_vector(), v1 = s1.value().to_vector(), vl = last.value().to_vector();
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      const size_t at = static_cast<size_t>(i * 3 + j);
      EXPECT_EQ(v0[at], av[at]);
      EXPECT_EQ(v0[6 + at], bv[at]);
      EXPECT_EQ(v1[static_cast<size_t>(i * 6 + j)], av[at]);      // [i][0][j]
      EXPECT_EQ(v1[static_cast<size_t>(i * 6 + 3 + j)], bv[at]);  // [i][1][j]
      EXPECT_EQ(vl[2 * at], av[at]);
      EXPECT_EQ(vl[2 * at + 1], bv[at]);
    }
  }
  expect_grads([&](const auto& v) { return stack(ctx_, std::span<const Variable>(v), 1); }, {a, b}, "stack");
  const Variable odd[] = {Variable(a), Variable(random_tensor({2, 4}, 3))};
  expect_error([&] { stack(ctx_, odd, 0); },
               "stack expects each tensor to be equal size, but got [2, 3] at entry 0 and [2, 4] at entry 1");
  expect_error([&] { stack(ctx_, std::span<const Variable>(), 0); }, "non-empty");
  expect_error([&] { stack(ctx_, parts, 3); }, "stack");
}

TEST_F(CompositeOpsTest, VarAndStdWithBesselsCorrectionOrWithout) {
  const Tensor x = random_tensor({3, 5}, 4, -2.0f, 3.0f);
  const std::vector<float> v = x.to_vector();
  for (int64_t correction : {int64_t{1}, int64_t{0}}) {
    const int rows[] = {1};
    const std::vector<float> got = var(ctx_, Variable(x), rows, correction).value().to_vector();
    ASSERT_EQ(got.size(), 3u);
    for (size_t r = 0; r < 3; ++r) {
      double m = 0.0, ss = 0.0;
      for (size_t c = 0; c < 5; ++c) m += v[r * 5 + c] / 5.0;
      for (size_t c = 0; c < 5; ++c) ss += (v[r * 5 + c] - m) * (v[r * 5 + c] - m);
      EXPECT_NEAR(got[r], ss / static_cast<double>(5 - correction), 1e-5) << "row " << r;
    }
  }
  double m = 0.0, ss = 0.0;
  for (float e : v) m += e / 15.0;
  for (float e : v) ss += (e - m) * (e - m);
  EXPECT_NEAR(std(ctx_, Variable(x)).value().to_vector()[0], std::sqrt(ss / 14.0), 1e-5);  // every dimension
  const int cols[] = {0};
  EXPECT_EQ(var(ctx_, Variable(x), cols, 1, true).shape(), (Shape{1, 5}));
  // One element and Bessel's correction: 0 / 0, as torch.var gives.
  EXPECT_TRUE(std::isnan(var(ctx_, Variable(random_tensor({1}, 5))).value().to_vector()[0]));
  const int last[] = {-1};
  expect_grads([&](const auto& in) { return var(ctx_, in[0], last); }, {x}, "var");
  expect_grads([&](const auto& in) { return std(ctx_, in[0], last, 0); }, {x}, "std");
}

TEST_F(CompositeOpsTest, TrilAndTriuKeepTheirTrianglesWithAnOffset) {
  const Tensor x = random_tensor({2, 3, 4}, 6);
  const std::vector<float> v = x.to_vector();
  for (int64_t diagonal : {int64_t{0}, int64_t{1}, int64_t{-1}}) {
    const std::vector<float> lower = tril(ctx_, Variable(x), diagonal).value().to_vector();
    const std::vector<float> upper = triu(ctx_, Variable(x), diagonal).value().to_vector();
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < 4; ++j) {
          const size_t at = static_cast<size_t>((b * 3 + i) * 4 + j);
          EXPECT_EQ(lower[at], j - i <= diagonal ? v[at] : 0.0f) << at << " diagonal " << diagonal;
          EXPECT_EQ(upper[at], j - i >= diagonal ? v[at] : 0.0f) << at << " diagonal " << diagonal;
        }
      }
    }
  }
  expect_grads([&](const auto& in) { return tril(ctx_, in[0], 1); }, {x}, "tril");
  expect_grads([&](const auto& in) { return triu(ctx_, in[0]); }, {x}, "triu");
  expect_error([&] { tril(ctx_, Variable(random_tensor({4}, 7))); }, "at least 2 dimensions");
}

TEST_F(CompositeOpsTest, MseAndL1LossesInEachReduction) {
  const Tensor x = random_tensor({4, 3}, 8, -2.0f, 2.0f), t = random_tensor({4, 3}, 9, -2.0f, 2.0f);
  const std::vector<float> xv = x.to_vector(), tv = t.to_vector();
  double se = 0.0, ae = 0.0;
  for (size_t i = 0; i < xv.size(); ++i) {
    se += (xv[i] - tv[i]) * (xv[i] - tv[i]);
    ae += std::abs(xv[i] - tv[i]);
  }
  EXPECT_NEAR(mse_loss(ctx_, Variable(x), Variable(t)).value().to_vector()[0], se / 12.0, 1e-5);
  EXPECT_NEAR(mse_loss(ctx_, Variable(x), Variable(t), LossReduction::kSum).value().to_vector()[0], se, 1e-4);
  EXPECT_NEAR(l1_loss(ctx_, Variable(x), Variable(t)).value().to_vector()[0], ae / 12.0, 1e-5);
  EXPECT_EQ(l1_loss(ctx_, Variable(x), Variable(t), LossReduction::kNone).shape(), (Shape{4, 3}));
  expect_grads([&](const auto& in) { return mse_loss(ctx_, in[0], in[1]); }, {x, t}, "mse_loss");
  expect_grads([&](const auto& in) { return l1_loss(ctx_, in[0], in[1], LossReduction::kSum); }, {x, t}, "l1_loss");
  expect_error([&] { mse_loss(ctx_, Variable(x), Variable(random_tensor({4, 1}, 10))); },
               "mse_loss: target [4, 1] must have the input's shape [4, 3]");
}

TEST_F(CompositeOpsTest, SmoothL1AndHuberAreQuadraticInsideAndLinearOutside) {
  const Tensor x = random_tensor({5, 4}, 14, -3.0f, 3.0f), t = random_tensor({5, 4}, 15, -1.0f, 1.0f);
  const std::vector<float> xv = x.to_vector(), tv = t.to_vector();
  for (float beta : {0.5f, 1.0f, 2.0f}) {
    double smooth = 0.0, huber = 0.0;
    for (size_t i = 0; i < xv.size(); ++i) {
      const double a = std::abs(static_cast<double>(xv[i]) - tv[i]);
      smooth += a < beta ? 0.5 * a * a / beta : a - 0.5 * beta;
      huber += a <= beta ? 0.5 * a * a : beta * (a - 0.5 * beta);
    }
    SCOPED_TRACE(::testing::Message() << "beta " << beta);
    EXPECT_NEAR(smooth_l1_loss(ctx_, Variable(x), Variable(t), LossReduction::kSum, beta).value().to_vector()[0], smooth,
                1e-5 * smooth);
    EXPECT_NEAR(huber_loss(ctx_, Variable(x), Variable(t), LossReduction::kMean, beta).value().to_vector()[0],
                huber / 20.0, 1e-5 * huber);
    expect_grads([&](const auto& in) { return smooth_l1_loss(ctx_, in[0], in[1], LossReduction::kSum, beta); }, {x, t},
                 "smooth_l1_loss");
  }
  EXPECT_EQ(smooth_l1_loss(ctx_, Variable(x), Variable(t), LossReduction::kMean, 0.0f).value().to_vector(),
            l1_loss(ctx_, Variable(x), Variable(t)).value().to_vector());
  expect_error([&] { huber_loss(ctx_, Variable(x), Variable(t), LossReduction::kMean, 0.0f); },
               "huber_loss: delta must be positive");
  expect_error([&] { smooth_l1_loss(ctx_, Variable(x), Variable(t), LossReduction::kMean, -1.0f); },
               "beta must be non-negative");
}

TEST_F(CompositeOpsTest, BinaryCrossEntropyWithLogitsIsStableAndHasTheClosedFormGradient) {
  Tensor x = random_tensor({3, 4}, 11, -4.0f, 4.0f);
  x.data<float>()[0] = 0.0f;     // where relu and abs have no derivative
  x.data<float>()[1] = 120.0f;   // exp(120) overflows f32: the stable form must not
  x.data<float>()[2] = -120.0f;
  const Tensor y = random_tensor({3, 4}, 12, 0.0f, 1.0f);
  const std::vector<float> xv = x.to_vector(), yv = y.to_vector();
  Variable logits(x, true), target(y, true);
  Variable loss = binary_cross_entropy_with_logits(ctx_, logits, target);
  double want = 0.0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double a = xv[i], b = yv[i];
    want += (std::max(a, 0.0) - a * b + std::log1p(std::exp(-std::abs(a)))) / 12.0;
  }
  EXPECT_NEAR(loss.value().to_vector()[0], want, 1e-5 * std::max(1.0, std::abs(want)));
  loss.backward(&ctx_);
  const std::vector<float> dx = logits.grad().to_vector(), dy = target.grad().to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(dx[i], (1.0 / (1.0 + std::exp(-static_cast<double>(xv[i]))) - yv[i]) / 12.0, 1e-6) << i;
    EXPECT_NEAR(dy[i], -xv[i] / 12.0, 1e-5) << i;
  }
  const Tensor moderate = random_tensor({3, 4}, 13, -3.0f, 3.0f);
  expect_grads([&](const auto& in) { return binary_cross_entropy_with_logits(ctx_, in[0], in[1], LossReduction::kSum); },
               {moderate, y}, "binary_cross_entropy_with_logits");
}

}  // namespace
}  // namespace tandem::autograd
