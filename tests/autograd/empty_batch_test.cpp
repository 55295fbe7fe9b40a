// A linear layer given a batch of no rows (the last shard of a split, a filtered batch) gives an
// empty result and zero weight gradients, as PyTorch does, where it once died of SIGFPE in oneDNN.
#include <gtest/gtest.h>

#include <vector>

#include "engine/autograd/ops.h"

namespace tandem::autograd {
namespace {

TEST(EmptyBatch, LinearOverNoRowsGivesAnEmptyResultAndZeroGradients) {
  ExecutionContext ctx(Device::cpu(), 1);
  Variable w(Tensor::from_vector(std::vector<float>(12, 0.5f), {3, 4}), true, "w");
  Variable b(Tensor::from_vector({1, 2, 3}, {3}), true, "b");
  Variable x(Tensor::zeros({0, 4}), true, "x");
  Variable y = linear(ctx, x, w, b);
  EXPECT_EQ(y.shape(), Shape({0, 3}));
  Variable loss = sum(ctx, y);
  EXPECT_EQ(loss.value().to_vector(), (std::vector<float>{0}));
  loss.backward(&ctx);
  EXPECT_EQ(w.grad().shape(), Shape({3, 4}));
  EXPECT_EQ(w.grad().to_vector(), std::vector<float>(12, 0.0f));
  EXPECT_EQ(b.grad().to_vector(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(x.grad().shape(), Shape({0, 4}));
}

TEST(EmptyBatch, ALinearLayerOverFoldedLeadingDimensionsOfNoElements) {
  ExecutionContext ctx(Device::cpu(), 1);
  Variable w(Tensor::from_vector(std::vector<float>(6, 1.0f), {3, 2}), true, "w");
  Variable y = linear(ctx, Variable(Tensor::zeros({2, 0, 2})), w, Variable());
  EXPECT_EQ(y.shape(), Shape({2, 0, 3}));
  sum(ctx, y).backward(&ctx);
  EXPECT_EQ(w.grad().to_vector(), std::vector<float>(6, 0.0f));
}

TEST(EmptyBatch, LinearWithNoInputFeaturesGivesTheBias) {
  ExecutionContext ctx(Device::cpu(), 1);
  Variable w(Tensor::zeros({3, 0}), true, "w");
  Variable b(Tensor::from_vector({1, 2, 3}, {3}), true, "b");
  Variable y = linear(ctx, Variable(Tensor::zeros({2, 0})), w, b);
  EXPECT_EQ(y.value().to_vector(), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  sum(ctx, y).backward(&ctx);
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{2, 2, 2}));  // one per row
  EXPECT_EQ(w.grad().shape(), Shape({3, 0}));
}

}  // namespace
}  // namespace tandem::autograd
