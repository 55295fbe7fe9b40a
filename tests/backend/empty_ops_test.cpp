// Products with a zero dimension, as PyTorch gives them: no rows is an empty result (oneDNN once
// divided by the zero and the process died of SIGFPE), and a sum over K = 0 terms is zeros.
#include <gtest/gtest.h>

#include <cmath>

#include "backend_test_util.h"

namespace tandem::backend::testing {
namespace {

class EmptyOpsTest : public ::testing::Test {
 protected:
  // Freed NaNs of the sizes the results take, so that a result the op never wrote would show
  // (the caching allocator hands those blocks out again) rather than read as fresh zeros.
  void dirty_the_allocator() {
    for (int64_t n : {3, 4, 6, 12, 16}) {
      Tensor t = Tensor::empty({n});
      fill(ctx_, std::nanf(""), t);
    }
  }

  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_F(EmptyOpsTest, MatmulWithNoRowsOrColumnsIsEmpty) {
  Tensor c = matmul(ctx_, Tensor::zeros({0, 4}), to_tensor(random_vec(20, 1), {4, 5}));
  EXPECT_EQ(c.shape(), Shape({0, 5}));
  EXPECT_EQ(matmul(ctx_, to_tensor(random_vec(8, 2), {2, 4}), Tensor::zeros({4, 0})).shape(), Shape({2, 0}));
  // Transposed operands: a stored (K, M) with M = 0.
  EXPECT_EQ(matmul(ctx_, Tensor::zeros({4, 0}), to_tensor(random_vec(20, 3), {4, 5}), true, false).shape(),
            Shape({0, 5}));
}

TEST_F(EmptyOpsTest, MatmulOverNoInnerTermsIsZeros) {
  for (bool ta : {false, true}) {
    dirty_the_allocator();
    Tensor a = ta ? Tensor::zeros({0, 2}) : Tensor::zeros({2, 0});
    Tensor c = matmul(ctx_, a, Tensor::zeros({0, 3}), ta, false);
    EXPECT_EQ(c.shape(), Shape({2, 3}));
    EXPECT_EQ(to_vec(c), Vec(6, 0.0)) << "transpose_a " << ta;
  }
}

TEST_F(EmptyOpsTest, LinearOverNoRowsIsEmptyAndItsWeightGradientsAreZeros) {
  Tensor x = Tensor::zeros({0, 4}), w = to_tensor(random_vec(12, 4), {3, 4}), b = to_tensor(random_vec(3, 5), {3});
  Tensor y = linear_forward(ctx_, x, w, b);
  EXPECT_EQ(y.shape(), Shape({0, 3}));
  EXPECT_EQ(linear_forward(ctx_, x, w).shape(), Shape({0, 3}));

  Tensor dy = Tensor::zeros({0, 3});
  EXPECT_EQ(linear_backward_data(ctx_, dy, w).shape(), Shape({0, 4}));
  dirty_the_allocator();
  LinearWeightGrads g = linear_backward_weights(ctx_, x, dy, true);
  EXPECT_EQ(g.dw.shape(), Shape({3, 4}));
  EXPECT_EQ(to_vec(g.dw), Vec(12, 0.0));  // a sum over no rows
  ASSERT_TRUE(g.db.defined());
  EXPECT_EQ(to_vec(g.db), Vec(3, 0.0));
  EXPECT_FALSE(linear_backward_weights(ctx_, x, dy, false).db.defined());
}

TEST_F(EmptyOpsTest, LinearWithNoInputFeaturesGivesTheBiasInEveryRow) {
  Vec bias = random_vec(3, 6);
  Tensor x = Tensor::zeros({2, 0}), w = Tensor::zeros({3, 0});
  dirty_the_allocator();
  Tensor y = linear_forward(ctx_, x, w, to_tensor(bias, {3}));
  EXPECT_EQ(y.shape(), Shape({2, 3}));
  EXPECT_EQ(to_vec(y), (Vec{bias[0], bias[1], bias[2], bias[0], bias[1], bias[2]}));
  dirty_the_allocator();
  EXPECT_EQ(to_vec(linear_forward(ctx_, x, w)), Vec(6, 0.0));

  // Backward: dx has no features, dw no elements, and db still sums dy over the rows.
  Vec dy = random_vec(6, 7);
  Tensor tdy = to_tensor(dy, {2, 3});
  EXPECT_EQ(linear_backward_data(ctx_, tdy, w).shape(), Shape({2, 0}));
  LinearWeightGrads g = linear_backward_weights(ctx_, x, tdy, true);
  EXPECT_EQ(g.dw.shape(), Shape({3, 0}));
  Vec db = to_vec(g.db);
  ASSERT_EQ(db.size(), 3u);
  for (size_t o = 0; o < 3; ++o) EXPECT_NEAR(db[o], dy[o] + dy[3 + o], 1e-6) << o;
}

TEST_F(EmptyOpsTest, LinearBackwardDataThroughNoOutputsIsZeros) {
  // dy (2, 0) and w (0, 4): dx = dy w sums over zero outputs.
  dirty_the_allocator();
  Tensor dx = linear_backward_data(ctx_, Tensor::zeros({2, 0}), Tensor::zeros({0, 4}));
  EXPECT_EQ(dx.shape(), Shape({2, 4}));
  EXPECT_EQ(to_vec(dx), Vec(8, 0.0));
  LinearWeightGrads g = linear_backward_weights(ctx_, to_tensor(random_vec(8, 8), {2, 4}), Tensor::zeros({2, 0}), true);
  EXPECT_EQ(g.dw.shape(), Shape({0, 4}));
  EXPECT_EQ(g.db.shape(), Shape({0}));
}

}  // namespace
}  // namespace tandem::backend::testing
