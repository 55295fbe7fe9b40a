// reshape with torch.reshape's -1: the size is inferred from the element count, the gradient flows
// back in x's shape, and sizes that cannot fit are refused with PyTorch's message.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/autograd/ops.h"

namespace tandem::autograd {
namespace {

Variable iota(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return Variable(Tensor::from_vector(v, shape), true, "x");
}

TEST(ReshapeInfer, MinusOneTakesWhatTheOtherSizesLeave) {
  ExecutionContext ctx;
  Variable x = iota({2, 3, 4});
  EXPECT_EQ(reshape(ctx, x, {2, -1}).shape(), Shape({2, 12}));
  EXPECT_EQ(reshape(ctx, x, {-1}).shape(), Shape({24}));
  EXPECT_EQ(reshape(ctx, x, {4, -1, 3}).shape(), Shape({4, 2, 3}));
  const std::vector<int64_t> sizes{-1, 6};
  Variable y = reshape(ctx, x, std::span<const int64_t>(sizes));
  EXPECT_EQ(y.shape(), Shape({4, 6}));
  EXPECT_EQ(y.value().to_vector(), x.value().to_vector());
}

TEST(ReshapeInfer, TheGradientComesBackInTheInputsShape) {
  ExecutionContext ctx;
  Variable x = iota({2, 3, 4});
  Variable loss = sum(ctx, mul(ctx, reshape(ctx, x, {-1, 8}), reshape(ctx, x, {-1, 8})));
  loss.backward(&ctx);
  ASSERT_EQ(x.grad().shape(), Shape({2, 3, 4}));
  std::vector<float> g = x.grad().to_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(g[i], 2.0f * static_cast<float>(i)) << i;
}

TEST(ReshapeInfer, SizesThatCannotHoldTheElementsAreRefused) {
  ExecutionContext ctx;
  Variable x = iota({2, 3, 4});
  Variable empty = iota({0, 3});
  const std::vector<std::pair<Variable, std::vector<int64_t>>> bad{
      {x, {-1, -1}}, {x, {5, -1}}, {x, {2, -2}}, {x, {7, 4}}, {empty, {0, -1}}};
  for (const auto& [input, sizes] : bad) {
    try {
      reshape(ctx, input, std::span<const int64_t>(sizes));
      ADD_FAILURE() << "reshape accepted sizes " << sizes.size();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("is invalid for input of size " + std::to_string(input.value().numel())),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem::autograd
