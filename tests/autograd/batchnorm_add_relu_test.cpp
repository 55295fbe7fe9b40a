// relu(batchnorm(x) + shortcut) as one op: its gradients are those of batch norm followed by
// add_relu, to the bit, for x, gamma, beta and the shortcut; and they match finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd/gradcheck.h"
#include "engine/autograd/ops.h"

namespace tandem::autograd {
namespace {

Tensor filled(const Shape& shape, MemoryFormat format, float scale, float phase, float offset = 0.0f) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = offset + scale * std::sin(phase * static_cast<float>(i + 1));
  return Tensor::from_vector(v, shape).to_format(format);
}

struct Grads {
  std::vector<float> y, x, gamma, beta, shortcut, running_mean, running_var;
};

// Runs one of the two forms on fresh variables and returns the output and every gradient.
Grads run(bool fused, const Shape& shape, MemoryFormat format) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  const Shape channels{shape[1]};
  Variable x(filled(shape, format, 2.0f, 0.37f, 0.5f), true, "x");
  Variable shortcut(filled(shape, format, 1.5f, 0.73f), true, "shortcut");
  Variable gamma(filled(channels, MemoryFormat::kContiguous, 0.4f, 1.1f, 1.0f), true, "gamma");
  Variable beta(filled(channels, MemoryFormat::kContiguous, 0.3f, 0.9f), true, "beta");
  Tensor rm = Tensor::zeros(channels), rv = Tensor::zeros(channels);
  BatchNormParams p;
  Variable y = fused ? batchnorm_add_relu_training(ctx, x, gamma, beta, shortcut, rm, rv, p)
                     : add_relu(ctx, batchnorm_training(ctx, x, gamma, beta, rm, rv, p), shortcut);
  Variable weights(filled(shape, format, 1.0f, 0.19f), false, "weights");
  sum(ctx, mul(ctx, y, weights)).backward(&ctx);
  return {y.value().to_vector(), x.grad().to_vector(),        gamma.grad().to_vector(), beta.grad().to_vector(),
          shortcut.grad().to_vector(), rm.to_vector(), rv.to_vector()};
}

class BatchNormAddReluGradTest : public ::testing::TestWithParam<std::tuple<Shape, MemoryFormat>> {};

TEST_P(BatchNormAddReluGradTest, EqualsBatchNormThenAddReluBitForBit) {
  const auto& [shape, format] = GetParam();
  Grads fused = run(true, shape, format), pair = run(false, shape, format);
  EXPECT_EQ(fused.y, pair.y);
  EXPECT_EQ(fused.x, pair.x);
  EXPECT_EQ(fused.gamma, pair.gamma);
  EXPECT_EQ(fused.beta, pair.beta);
  EXPECT_EQ(fused.shortcut, pair.shortcut);
  EXPECT_EQ(fused.running_mean, pair.running_mean);
  EXPECT_EQ(fused.running_var, pair.running_var);
  // The ReLU clips some outputs and passes others, so the mask is exercised both ways.
  size_t clipped = 0;
  for (float v : fused.y) clipped += v == 0.0f ? 1 : 0;
  EXPECT_GT(clipped, fused.y.size() / 10);
  EXPECT_LT(clipped, fused.y.size() * 9 / 10);
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormAddReluGradTest,
                         ::testing::Combine(::testing::Values(Shape{4, 32, 5, 5}, Shape{2, 16, 3, 7},
                                                              Shape{2, 19, 4, 4}),
                                            ::testing::Values(MemoryFormat::kContiguous,
                                                              MemoryFormat::kChannelsLast)));

// Finite differences, with a shortcut large enough that no perturbation crosses the ReLU's kink.
TEST(BatchNormAddReluGradCheck, MatchesFiniteDifferences) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  const Shape shape{2, 16, 3, 3};
  Tensor x = filled(shape, MemoryFormat::kChannelsLast, 2.0f, 0.37f);
  Tensor shortcut = filled(shape, MemoryFormat::kChannelsLast, 0.5f, 0.73f, 6.0f);
  Tensor gamma = filled({16}, MemoryFormat::kContiguous, 0.4f, 1.1f, 1.0f);
  Tensor beta = filled({16}, MemoryFormat::kContiguous, 0.3f, 0.9f);
  Tensor rm = Tensor::zeros({16}), rv = Tensor::zeros({16});
  GradCheckResult r = check_gradients(
      ctx,
      [&](const std::vector<Variable>& v) {
        return batchnorm_add_relu_training(ctx, v[0], v[1], v[2], v[3], rm, rv, BatchNormParams{});
      },
      {x, gamma, beta, shortcut});
  EXPECT_TRUE(r.ok) << r.worst;
}

}  // namespace
}  // namespace tandem::autograd
