// The tape's gradients of the N-D and transformer ops against central differences
// (check_gradients): each op alone and composed the way a transformer block composes them,
// broadcasting included (a broadcast input's gradient is summed back to its shape).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

#include "engine/autograd/gradcheck.h"
#include "engine/autograd/ops.h"
#include "engine/core/random.h"
#include "tests/autograd/autograd_test_util.h"

namespace tandem::autograd {
namespace {

using tandem::testing::random_tensor;

class TensorGradTest : public ::testing::Test {
 protected:
  void expect_ok(const std::function<Variable(const std::vector<Variable>&)>& f, const std::vector<Tensor>& inputs,
                 const char* what) {
    GradCheckResult r = check_gradients(ctx_, f, inputs);
    EXPECT_TRUE(r.ok) << what << ": " << r.worst;
  }
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_F(TensorGradTest, ShapeOps) {
  Tensor x = random_tensor({2, 3, 4}, 1);
  const int perm[] = {2, 0, 1};
  expect_ok([&](const auto& v) { return permute(ctx_, v[0], perm); }, {x}, "permute");
  expect_ok([&](const auto& v) { return transpose(ctx_, v[0], -1, 0); }, {x}, "transpose");
  expect_ok([&](const auto& v) { return narrow(ctx_, v[0], 1, 1, 2); }, {x}, "narrow");
  expect_ok(
      [&](const auto& v) {
        std::vector<Variable> parts = split(ctx_, v[0], 3, 2);  // sizes 3 and 1
        const Variable swapped[] = {parts[1], parts[0], parts[1]};
        return concat(ctx_, swapped, -1);
      },
      {x}, "split and concat");
  expect_ok([&](const auto& v) { return chunk(ctx_, v[0], 2, 0)[1]; }, {x}, "chunk");
}

TEST_F(TensorGradTest, BroadcastingArithmetic) {
  Tensor a = random_tensor({2, 3, 4}, 2, 0.5f, 1.5f), b = random_tensor({3, 1}, 3, 0.5f, 1.5f);
  expect_ok([&](const auto& v) { return add(ctx_, v[0], v[1]); }, {a, b}, "add");
  expect_ok([&](const auto& v) { return sub(ctx_, v[1], v[0]); }, {a, b}, "sub");
  expect_ok([&](const auto& v) { return mul(ctx_, v[0], v[1]); }, {a, b}, "mul");
  expect_ok([&](const auto& v) { return div(ctx_, v[0], v[1]); }, {a, b}, "div");
}

TEST_F(TensorGradTest, UnaryFunctionsAndMaskedFill) {
  Tensor x = random_tensor({3, 5}, 4, 0.2f, 2.0f);
  expect_ok([&](const auto& v) { return exp(ctx_, v[0]); }, {x}, "exp");
  expect_ok([&](const auto& v) { return log(ctx_, v[0]); }, {x}, "log");
  expect_ok([&](const auto& v) { return sqrt(ctx_, v[0]); }, {x}, "sqrt");
  expect_ok([&](const auto& v) { return rsqrt(ctx_, v[0]); }, {x}, "rsqrt");
  Tensor y = random_tensor({3, 5}, 5, -2.0f, 2.0f);
  expect_ok([&](const auto& v) { return tanh(ctx_, v[0]); }, {y}, "tanh");
  expect_ok([&](const auto& v) { return gelu(ctx_, v[0]); }, {y}, "gelu");
  expect_ok([&](const auto& v) { return gelu(ctx_, v[0], true); }, {y}, "gelu tanh");
  expect_ok([&](const auto& v) { return sigmoid(ctx_, v[0]); }, {y}, "sigmoid");
  expect_ok([&](const auto& v) { return silu(ctx_, v[0]); }, {y}, "silu");
  expect_ok([&](const auto& v) { return abs(ctx_, v[0]); }, {y}, "abs");  // no element within h of 0
  expect_ok([&](const auto& v) { return sin(ctx_, v[0]); }, {y}, "sin");
  expect_ok([&](const auto& v) { return cos(ctx_, v[0]); }, {y}, "cos");
  Tensor mask = Tensor::zeros({1, 5}, DType::kU8);
  mask.data<uint8_t>()[2] = 1;
  expect_ok([&](const auto& v) { return masked_fill(ctx_, v[0], mask, -3.0f); }, {y}, "masked_fill");
}

TEST_F(TensorGradTest, ReductionsAndSoftmax) {
  Tensor x = random_tensor({3, 4, 5}, 6, -2.0f, 2.0f);
  const int dims[] = {0, 2};
  expect_ok([&](const auto& v) { return sum(ctx_, v[0], dims, true); }, {x}, "sum");
  expect_ok([&](const auto& v) { return mean(ctx_, v[0], dims, false); }, {x}, "mean");
  expect_ok([&](const auto& v) { return amax(ctx_, v[0], dims, false); }, {x}, "amax");
  expect_ok([&](const auto& v) { return softmax(ctx_, v[0], 1); }, {x}, "softmax");
  expect_ok([&](const auto& v) { return log_softmax(ctx_, v[0], -1); }, {x}, "log_softmax");
}

TEST_F(TensorGradTest, TransformerOps) {
  Tensor x = random_tensor({2, 3, 8}, 7), w = random_tensor({8}, 8, 0.5f, 1.5f), b = random_tensor({8}, 9);
  expect_ok([&](const auto& v) { return layer_norm(ctx_, v[0], 1, v[1], v[2]); }, {x, w, b}, "layer_norm");
  Tensor lw = random_tensor({5, 8}, 10), lb = random_tensor({5}, 11);
  expect_ok([&](const auto& v) { return linear(ctx_, v[0], v[1], v[2]); }, {x, lw, lb}, "linear on (B, T, C)");
  Tensor a = random_tensor({2, 1, 3, 4}, 12), m = random_tensor({3, 4, 2}, 13);
  expect_ok([&](const auto& v) { return matmul(ctx_, v[0], v[1]); }, {a, m}, "matmul broadcast");
  Tensor q = random_tensor({1, 2, 5, 4}, 14), k = random_tensor({1, 2, 5, 4}, 15), val = random_tensor({1, 2, 5, 4}, 16);
  expect_ok([&](const auto& v) { return scaled_dot_product_attention(ctx_, v[0], v[1], v[2], {}, 0.0f, true); },
            {q, k, val}, "causal attention");
  // A boolean mask (true takes part), broadcast over batch and heads, with dropout at a fixed seed:
  // the forward draws its seed from the context, so each evaluation restarts the generator.
  Tensor keep = Tensor::zeros({5, 5}, DType::kU8);
  for (int i = 0; i < 25; ++i) keep.data<uint8_t>()[i] = (i % 3) != 1 || i % 5 == 0;
  expect_ok(
      [&](const auto& v) {
        ctx_.generator() = Generator(4);
        return scaled_dot_product_attention(ctx_, v[0], v[1], v[2], keep, 0.2f, false, 0.5f);
      },
      {q, k, val}, "masked attention with dropout");
}

TEST_F(TensorGradTest, EmbeddingAndTokenCrossEntropy) {
  Tensor weight = random_tensor({6, 4}, 17);
  Tensor ids = Tensor::empty({2, 3}, DType::kI64);
  const int64_t id_values[] = {5, 0, 5, 2, 1, 5};
  std::copy(std::begin(id_values), std::end(id_values), ids.data<int64_t>());
  expect_ok([&](const auto& v) { return embedding(ctx_, v[0], ids); }, {weight}, "embedding");
  Tensor logits = random_tensor({2, 3, 6}, 18, -2.0f, 2.0f);
  Tensor targets = ids.clone();
  targets.data<int64_t>()[4] = -100;
  expect_ok([&](const auto& v) { return softmax_cross_entropy(ctx_, v[0], targets, 0.1f, -100); }, {logits},
            "cross-entropy over (B, T, V) with ignore_index");
}

}  // namespace
}  // namespace tandem::autograd
