// Every op takes empty tensors, as PyTorch's do: a batch of 0 rows (or a dimension of 0) gives an
// empty result and, where it has one, an empty or zero gradient, or a named error; never a crash
// inside a library (oneDNN divides by a zero dimension: SIGFPE).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/autograd/ops.h"

namespace tandem::autograd {
namespace {

Variable param(const Shape& shape) { return Variable(Tensor::zeros(shape), true, "p"); }
Variable input(const Shape& shape) { return Variable(Tensor::zeros(shape), true, "x"); }

// Runs the op forward, then backward through the sum of its output; either may throw a named
// tandem::Error (a refusal is an answer), but nothing may crash. Returns the output's shape.
std::string forward_backward(ExecutionContext& ctx, const std::function<Variable()>& op) {
  try {
    Variable y = op();
    Variable loss = sum(ctx, y);
    loss.backward(&ctx);
    return y.shape().str();
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

class EmptyTensors : public ::testing::Test {
 protected:
  ExecutionContext ctx_{Device::cpu(), 1};
};

TEST_F(EmptyTensors, LayersOnAnEmptyBatch) {
  Variable x = input({0, 3, 5, 5});
  Variable w = param({4, 3, 3, 3}), b = param({4});
  EXPECT_EQ(forward_backward(ctx_, [&] { return conv2d(ctx_, x, w, b, {.padding = {1, 1}}); }), "[0, 4, 5, 5]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return max_pool2d(ctx_, x, {}); }), "[0, 3, 2, 2]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return avg_pool2d(ctx_, x, {}); }), "[0, 3, 2, 2]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return global_avg_pool(ctx_, x); }), "[0, 3, 1, 1]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return relu(ctx_, x); }), "[0, 3, 5, 5]");
  Variable rows = input({0, 8});
  Variable lw = param({2, 8}), lb = param({2});
  EXPECT_EQ(forward_backward(ctx_, [&] { return linear(ctx_, rows, lw, lb); }), "[0, 2]");
  Variable ln_w = param({8}), ln_b = param({8});
  EXPECT_EQ(forward_backward(ctx_, [&] { return layer_norm(ctx_, rows, 1, ln_w, ln_b, 1e-5f); }), "[0, 8]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return gelu(ctx_, rows); }), "[0, 8]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return softmax(ctx_, rows, -1); }), "[0, 8]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return log_softmax(ctx_, rows, -1); }), "[0, 8]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return dropout(ctx_, rows, 0.5f); }), "[0, 8]");
  Variable table = param({10, 4});
  EXPECT_EQ(forward_backward(ctx_, [&] { return embedding(ctx_, table, Tensor::zeros({0, 3}, DType::kI64)); }),
            "[0, 3, 4]");
}

TEST_F(EmptyTensors, BatchNormOnAnEmptyBatchIsRefusedOrEmpty) {
  Variable x = input({0, 3, 4, 4});
  Variable gamma = param({3}), beta = param({3});
  Tensor mean = Tensor::zeros({3}), var = Tensor::zeros({3});
  const std::string r = forward_backward(ctx_, [&] { return batchnorm_training(ctx_, x, gamma, beta, mean, var, {}); });
  EXPECT_TRUE(r == "[0, 3, 4, 4]" || r.starts_with("error: ")) << r;
  NoGradGuard no_grad;  // eval-mode batch norm has no backward by design
  EXPECT_EQ(batchnorm_inference(ctx_, x, gamma, beta, mean, var, {}).shape().str(), "[0, 3, 4, 4]");
}

TEST_F(EmptyTensors, AttentionAndLossesOnNoRows) {
  Variable q = input({0, 2, 4, 8}), k = input({0, 2, 4, 8}), v = input({0, 2, 4, 8});
  EXPECT_EQ(forward_backward(ctx_, [&] { return scaled_dot_product_attention(ctx_, q, k, v, {}, 0.0f, true); }),
            "[0, 2, 4, 8]");
  Variable logits = input({0, 5});
  const Tensor labels = Tensor::zeros({0}, DType::kI64);
  EXPECT_EQ(forward_backward(ctx_, [&] { return softmax_cross_entropy(ctx_, logits, labels); }), "[0]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return cross_entropy_loss(ctx_, logits, labels, 0.1f, 4); }), "[]");
}

TEST_F(EmptyTensors, PointwiseShapesAndReductions) {
  Variable a = input({0, 3}), b = input({0, 3}), row = input({1, 3});
  EXPECT_EQ(forward_backward(ctx_, [&] { return add(ctx_, a, b); }), "[0, 3]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return mul(ctx_, a, row); }), "[0, 3]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return div(ctx_, a, row); }), "[0, 3]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return exp(ctx_, a); }), "[0, 3]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return log(ctx_, a); }), "[0, 3]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return tanh(ctx_, a); }), "[0, 3]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return matmul(ctx_, a, input({3, 2})); }), "[0, 2]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return transpose(ctx_, a, 0, 1); }), "[3, 0]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return reshape(ctx_, a, {3, 0}); }), "[3, 0]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return narrow(ctx_, row, 1, 1, 0); }), "[1, 0]");
  const std::vector<Variable> parts{a, row};
  EXPECT_EQ(forward_backward(ctx_, [&] { return concat(ctx_, parts, 0); }), "[1, 3]");
  const int last[] = {1};
  EXPECT_EQ(forward_backward(ctx_, [&] { return sum(ctx_, a, last); }), "[0]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return mean(ctx_, a, last); }), "[0]");
  EXPECT_EQ(forward_backward(ctx_, [&] { return amax(ctx_, a, last); }), "[0]");
  const int first[] = {0};
  const std::string r = forward_backward(ctx_, [&] { return amax(ctx_, a, first); });
  EXPECT_TRUE(r.starts_with("error: ")) << r;  // PyTorch refuses a max over no elements, too
  EXPECT_EQ(forward_backward(ctx_, [&] { return sum(ctx_, a, first); }), "[3]");
}

}  // namespace
}  // namespace tandem::autograd
