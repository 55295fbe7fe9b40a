// A linear layer under precision: bf16 rounds x and dy once for its three passes (x's bf16 copy is
// what the weight gradient keeps): y, dx and dw are bit for bit what the kernels give when each pass
// rounds its f32 operands itself, and the bias gradient is the column sums of the rounded dy.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"
#include "engine/core/random.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::autograd {
namespace {

Tensor normal(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = g.normal();
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

TEST(Bf16Linear, RoundsXAndDyOnceWithTheBitsOfEachPassRoundingItsOwn) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext& ctx = tandem::testing::bf16_cpu_context();
  const Tensor xt = normal({6, 2, 9}, 1), wt = normal({5, 9}, 2), bt = normal({5}, 3), dyt = normal({6, 2, 5}, 4);
  Variable x(xt, true), w(wt, true), b(bt, true);
  Variable y = linear(ctx, x, w, b);
  sum(ctx, mul(ctx, y, Variable(dyt))).backward(&ctx);  // seeds the backward with dy

  const Tensor x2 = xt.reshape(Shape({12, 9})), dy2 = dyt.reshape(Shape({12, 5}));
  EXPECT_TRUE(same_bits(y.value(), backend::linear_forward(ctx, x2, wt, bt)));
  EXPECT_TRUE(same_bits(x.grad(), backend::linear_backward_data(ctx, dy2, wt)));
  const backend::LinearWeightGrads g = backend::linear_backward_weights(ctx, x2, dy2, false);
  EXPECT_TRUE(same_bits(w.grad(), g.dw));
  std::vector<double> want(5, 0.0);
  for (int64_t i = 0; i < 12; ++i) {
    for (int64_t j = 0; j < 5; ++j)
      want[static_cast<size_t>(j)] += bf16_to_float(float_to_bf16(dy2.data<float>()[i * 5 + j]));
  }
  const std::vector<float> db = b.grad().to_vector();
  for (size_t j = 0; j < 5; ++j) EXPECT_EQ(db[j], static_cast<float>(want[j])) << "bias " << j;
}

}  // namespace
}  // namespace tandem::autograd
