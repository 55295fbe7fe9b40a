// The public gradient checker: it passes ops whose backward is right and catches one whose
// hand-written backward is wrong, naming the element.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd/gradcheck.h"
#include "engine/autograd/ops.h"

namespace tandem::autograd {
namespace {

// y = x^3 elementwise, a custom op; `factor` 3 is the right derivative's, anything else is a bug.
Variable cube(const Variable& x, float factor) {
  Tensor y = x.value().clone();
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = std::pow(x.value().data<float>()[i], 3.0f);
  Tensor saved = x.value();
  return make_op("cube", y, {x}, [saved, factor](const Tensor& dy) {
    Tensor dx = dy.clone();
    for (int64_t i = 0; i < dx.numel(); ++i) {
      const float v = saved.data<float>()[i];
      dx.data<float>()[i] = factor * v * v * dy.data<float>()[i];
    }
    return std::vector<Tensor>{dx};
  });
}

TEST(GradCheck, PassesOpsWithTheRightBackward) {
  ExecutionContext ctx(Device::cpu());
  Tensor x = Tensor::from_vector({0.5f, -1.2f, 0.3f, 2.0f, -0.7f, 1.1f}, {2, 3});
  Tensor w = Tensor::from_vector({0.2f, -0.4f, 0.9f, 0.1f, -0.3f, 0.6f}, {2, 3});
  GradCheckResult linear = check_gradients(
      ctx, [&](const std::vector<Variable>& v) { return autograd::linear(ctx, v[0], v[1], Variable()); }, {x, w});
  EXPECT_TRUE(linear.ok) << linear.worst;
  GradCheckResult custom = check_gradients(ctx, [](const std::vector<Variable>& v) { return cube(v[0], 3.0f); }, {x});
  EXPECT_TRUE(custom.ok) << custom.worst;
  EXPECT_LT(custom.max_abs_error, 1e-2);
}

// A channels_last input is perturbed in its memory order and compared in the same order, and the
// projection takes the output's layout (a convolution keeps its input's).
TEST(GradCheck, ChecksChannelsLastInputsInTheirMemoryOrder) {
  ExecutionContext ctx(Device::cpu());
  std::vector<float> xs(2 * 3 * 4 * 5), ws(4 * 3 * 3 * 3);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < ws.size(); ++i) ws[i] = std::cos(0.91f * static_cast<float>(i));
  Tensor x = Tensor::from_vector(xs, {2, 3, 4, 5}).to_format(MemoryFormat::kChannelsLast);
  Tensor w = Tensor::from_vector(ws, {4, 3, 3, 3});
  Conv2dParams p;
  p.padding = {1, 1};
  GradCheckResult conv = check_gradients(
      ctx, [&](const std::vector<Variable>& v) { return conv2d(ctx, v[0], v[1], Variable(), p); }, {x, w});
  EXPECT_TRUE(conv.ok) << conv.worst;
}

TEST(GradCheck, CatchesAWrongBackwardAndNamesTheElement) {
  ExecutionContext ctx(Device::cpu());
  Tensor x = Tensor::from_vector({0.5f, -1.2f, 0.3f, 2.0f}, {4});
  GradCheckResult wrong = check_gradients(ctx, [](const std::vector<Variable>& v) { return cube(v[0], 2.0f); }, {x});
  EXPECT_FALSE(wrong.ok);
  EXPECT_NE(wrong.worst.find("input 0 element 3"), std::string::npos) << wrong.worst;  // 2.0: the largest error
  EXPECT_GT(wrong.max_abs_error, 3.0);  // 12 - 8 on element 3, times its projection weight
}

}  // namespace
}  // namespace tandem::autograd
