// nn::RMSNorm, nn::GroupNorm and nn::Conv1d: PyTorch's parameter names, shapes and initial values
// (ones and zeros for the norms, Conv1d's uniform bound 1 / sqrt(fan_in)), a forward equal to the
// functional op's, and constructor errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd/composite.h"
#include "engine/nn/conv1d.h"
#include "engine/nn/norm_layers.h"
#include "engine/nn/init.h"

namespace tandem::nn {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  init::manual_seed(seed);
  Tensor t = Tensor::empty(shape);
  init::uniform(t, 1.0f);
  return t;
}

std::vector<std::string> names(const Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(name);
  return out;
}

void expect_same(const Variable& a, const Variable& b) {
  const std::vector<float> x = a.value().to_vector(), y = b.value().to_vector();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], y[i]) << i;
}

template <typename F>
void expect_invalid(F f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected an error with '" << part << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(NormConv1dLayers, RmsNormHasAWeightOfOnesAndCallsRmsNorm) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  RMSNorm norm(8);
  EXPECT_EQ(names(norm), std::vector<std::string>{"weight"});
  for (float w : norm.named_parameters()[0].second.value().to_vector()) EXPECT_EQ(w, 1.0f);
  const Variable x(random_tensor({3, 8}, 1));
  expect_same(norm.forward(ctx, x), autograd::rms_norm(ctx, x, 1, norm.named_parameters()[0].second));
  EXPECT_TRUE(names(RMSNorm(8, 1e-6f, false)).empty());
  expect_invalid([] { RMSNorm(0); }, "normalized_shape 0 must be positive");
  RMSNorm bare(8, 1e-6f, false);
  expect_invalid([&] { bare.forward(ctx, Variable(random_tensor({3, 7}, 2))); }, "must end in normalized_shape 8");
}

TEST(NormConv1dLayers, GroupNormHasPerChannelWeightAndBias) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  GroupNorm norm(2, 6);
  EXPECT_EQ(names(norm), (std::vector<std::string>{"weight", "bias"}));
  const Variable x(random_tensor({2, 6, 4}, 2));
  expect_same(norm.forward(ctx, x), autograd::group_norm(ctx, x, 2, norm.named_parameters()[0].second,
                                                         norm.named_parameters()[1].second));
  EXPECT_TRUE(names(GroupNorm(3, 6, 1e-5f, false)).empty());
  expect_invalid([] { GroupNorm(4, 6); }, "num_channels 6 must be a positive multiple of num_groups 4");
  expect_invalid([&] { norm.forward(ctx, Variable(random_tensor({2, 4, 4}, 3))); }, "C = num_channels 6");
  GroupNorm plain(3, 6, 1e-5f, false);
  expect_invalid([&] { plain.forward(ctx, Variable(random_tensor({2, 4, 4}, 3))); }, "C = num_channels 6");
}

TEST(NormConv1dLayers, Conv1dHasPyTorchsShapesAndInitialisationBound) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  Conv1dOptions o;
  o.in_channels = 4;
  o.out_channels = 6;
  o.kernel_size = 5;
  o.groups = 2;
  o.padding = 2;
  Conv1d conv(o);
  EXPECT_EQ(names(conv), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(conv.weight().shape(), (Shape{6, 2, 5}));
  const float bound = 1.0f / std::sqrt(10.0f);
  for (const auto& [name, p] : conv.named_parameters()) {
    for (float v : p.value().to_vector()) EXPECT_LE(std::abs(v), bound) << name;
  }
  const Variable x(random_tensor({3, 4, 9}, 4));
  const Variable y = conv.forward(ctx, x);
  EXPECT_EQ(y.shape(), (Shape{3, 6, 9}));  // padding 2 keeps the length at kernel 5
  expect_same(y, autograd::conv1d(ctx, x, conv.weight(), conv.named_parameters()[1].second, {1, 2, 1, 2}));
  o.groups = 3;
  expect_invalid([&] { Conv1d bad(o); }, "multiples of groups 3");
}

}  // namespace
}  // namespace tandem::nn
