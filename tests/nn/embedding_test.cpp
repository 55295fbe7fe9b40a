// Embedding: rows by id forward, gradients added into the rows of repeated ids backward, and a
// clear error for an id outside the table.
#include <gtest/gtest.h>

#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/nn/embedding.h"

namespace tandem::nn {
namespace {

Tensor ids_of(const std::vector<int64_t>& values, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kI64);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

TEST(Embedding, LooksUpRowsAndAddsGradientsOfRepeatedIds) {
  ExecutionContext ctx(Device::cpu());
  Embedding emb(5, 3);
  Tensor weight = emb.named_parameters().front().second.value();
  Variable y = emb.forward(ctx, autograd::Variable(ids_of({4, 1, 4, 0}, {2, 2})));
  ASSERT_EQ(y.shape(), Shape({2, 2, 3}));
  const float* w = weight.data<float>();
  const float* out = y.value().data<float>();
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(out[0 * 3 + j], w[4 * 3 + j]);
    EXPECT_EQ(out[1 * 3 + j], w[1 * 3 + j]);
    EXPECT_EQ(out[3 * 3 + j], w[0 * 3 + j]);
  }
  // d sum(y * c) / d w: row 4 gets the gradient of positions 0 and 2, rows 2 and 3 nothing.
  std::vector<float> c(12);
  for (size_t i = 0; i < c.size(); ++i) c[i] = 0.5f + static_cast<float>(i);
  autograd::Variable loss = autograd::sum(ctx, autograd::mul(ctx, y, autograd::Variable(Tensor::from_vector(c, {2, 2, 3}))));
  loss.backward(&ctx);
  std::vector<float> dw = emb.named_parameters().front().second.grad().to_vector();
  for (int j = 0; j < 3; ++j) {
    EXPECT_FLOAT_EQ(dw[4 * 3 + j], c[0 * 3 + j] + c[2 * 3 + j]);
    EXPECT_FLOAT_EQ(dw[1 * 3 + j], c[1 * 3 + j]);
    EXPECT_FLOAT_EQ(dw[0 * 3 + j], c[3 * 3 + j]);
    EXPECT_EQ(dw[2 * 3 + j], 0.0f);
    EXPECT_EQ(dw[3 * 3 + j], 0.0f);
  }
}

TEST(Embedding, AnIdOutsideTheTableNamesItsPosition) {
  ExecutionContext ctx(Device::cpu());
  Embedding emb(5, 3);
  try {
    emb.forward(ctx, autograd::Variable(ids_of({1, 5}, {1, 2})));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("id 5 at position 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::nn
