// Convolution forward and both backwards against the double reference, in both memory
// formats, over hand-picked and random shapes (odd sizes, strides, padding, dilation, groups,
// batch 1); gradients against finite differences of the reference.
#include <gtest/gtest.h>

#include <random>

#include "backend_test_util.h"

namespace tandem::backend::testing {
namespace {

struct ConvCase {
  Shape x, w;
  Conv2dParams p;
  bool bias;
};

Conv2dParams params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t g) {
  Conv2dParams p;
  p.stride = {sh, sw};
  p.padding = {ph, pw};
  p.dilation = {dh, dw};
  p.groups = g;
  return p;
}

std::vector<ConvCase> fixed_cases() {
  return {
      {{1, 3, 7, 7}, {4, 3, 3, 3}, params(1, 1, 1, 1, 1, 1, 1), true},
      {{2, 4, 8, 8}, {6, 4, 3, 3}, params(2, 2, 1, 1, 1, 1, 1), false},
      {{2, 6, 9, 7}, {4, 3, 3, 3}, params(1, 1, 2, 2, 2, 2, 2), true},
      {{3, 4, 5, 6}, {4, 1, 3, 1}, params(2, 1, 1, 0, 1, 1, 4), false},   // depthwise
      {{2, 8, 6, 6}, {16, 8, 1, 1}, params(2, 2, 0, 0, 1, 1, 1), false},  // projection shortcut
      {{1, 5, 11, 9}, {7, 5, 5, 3}, params(1, 2, 2, 1, 1, 2, 1), true},
      // 16 channels in and out: channels_last runs oneDNN's nChw16c kernels on the same memory.
      {{2, 16, 7, 6}, {16, 16, 3, 3}, params(2, 1, 1, 1, 1, 1, 1), true},
      {{2, 16, 5, 5}, {32, 16, 3, 3}, params(2, 2, 1, 1, 1, 1, 1), false},  // 16 in, 32 out: plain nhwc
      {{2, 16, 5, 5}, {16, 16, 3, 3}, params(1, 1, 1, 1, 1, 1, 1), false},
      // stride 1 on planes of 7x7 and more: backward data runs as a forward convolution of the
      // turned-around weights
      {{2, 3, 8, 7}, {4, 3, 3, 1}, params(1, 1, 1, 0, 1, 1, 1), true},   // padding K-1-pad = (1, 0)
      {{1, 4, 7, 8}, {5, 4, 3, 2}, params(1, 1, 0, 1, 1, 1, 1), false},  // padding (2, 0)
      // ResNet-20's later stages: oneDNN picks other kernels (brgconv) for 32 and 64 channels
      {{2, 32, 7, 7}, {32, 32, 3, 3}, params(1, 1, 1, 1, 1, 1, 1), false},
      {{2, 64, 7, 7}, {64, 64, 3, 3}, params(1, 1, 1, 1, 1, 1, 1), false},
      // Winograd (cpu_conv_winograd.h): 64 channels on 8x8, 128 from 4x4; padding 1, and 0
      {{2, 64, 8, 8}, {64, 64, 3, 3}, params(1, 1, 1, 1, 1, 1, 1), true},
      {{2, 128, 4, 5}, {128, 128, 3, 3}, params(1, 1, 1, 1, 1, 1, 1), false},
      {{1, 128, 6, 7}, {144, 128, 3, 3}, params(1, 1, 0, 0, 1, 1, 1), true},
      // channels_last output planes of 4x4 and less: im2col + matmul (cpu_conv_gemm.h)
      {{2, 64, 2, 2}, {64, 64, 3, 3}, params(1, 1, 1, 1, 1, 1, 1), true},
      {{2, 6, 7, 7}, {5, 6, 3, 3}, params(2, 2, 2, 2, 2, 2, 1), false},
  };
}

// Random valid cases from a fixed seed: the same shapes every run, but none chosen by hand.
std::vector<ConvCase> random_cases(int count) {
  std::mt19937 gen(20240611);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  std::vector<ConvCase> cases;
  while (static_cast<int>(cases.size()) < count) {
    int64_t g = pick(1, 3);
    int64_t c = g * pick(1, 3), k = g * pick(1, 3);
    Conv2dParams p = params(pick(1, 2), pick(1, 2), pick(0, 2), pick(0, 2), pick(1, 2), pick(1, 2), g);
    Shape x{pick(1, 3), c, pick(3, 10), pick(3, 10)};
    Shape w{k, c / g, pick(1, 3), pick(1, 3)};
    bool fits = (w[2] - 1) * p.dilation[0] + 1 <= x[2] + 2 * p.padding[0] &&
                (w[3] - 1) * p.dilation[1] + 1 <= x[3] + 2 * p.padding[1];
    if (fits) cases.push_back({x, w, p, pick(0, 1) == 1});
  }
  return cases;
}

// The fixed cases small enough for finite differences (one forward per input element).
std::vector<ConvCase> gradient_cases() {
  std::vector<ConvCase> cases;
  for (const ConvCase& c : fixed_cases()) {
    if (c.x.numel() + c.w.numel() <= 4000) cases.push_back(c);
  }
  return cases;
}

std::vector<ConvCase> all_cases() {
  std::vector<ConvCase> cases = fixed_cases();
  for (const ConvCase& c : random_cases(8)) cases.push_back(c);
  return cases;
}

class ConvTest : public ::testing::TestWithParam<std::tuple<ConvCase, MemoryFormat>> {
 protected:
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_P(ConvTest, ForwardAndBackwardsMatchReference) {
  const auto& [c, format] = GetParam();
  Shape ys = conv2d_output_shape(c.p, c.x, c.w);
  Vec x = random_vec(static_cast<size_t>(c.x.numel()), 1);
  Vec w = random_vec(static_cast<size_t>(c.w.numel()), 2);
  Vec b = c.bias ? random_vec(static_cast<size_t>(c.w[0]), 3) : Vec();
  Vec dy = random_vec(static_cast<size_t>(ys.numel()), 4);
  Tensor tb = c.bias ? to_tensor(b, {c.w[0]}) : Tensor();

  Tensor y = conv2d_forward(ctx_, c.p, to_tensor(x, c.x, format), to_tensor(w, c.w), tb);
  EXPECT_EQ(y.shape(), ys);
  EXPECT_EQ(y.format(), format);
  EXPECT_LT(rel_error(to_vec(y), conv2d_ref(c.p, x, c.x, w, c.w, b)), 1e-4);

  Tensor dx = conv2d_backward_data(ctx_, c.p, to_tensor(dy, ys, format), to_tensor(w, c.w), c.x);
  EXPECT_EQ(dx.format(), format);
  EXPECT_LT(rel_error(to_vec(dx), conv2d_backward_data_ref(c.p, dy, w, c.w, c.x)), 1e-4);

  ConvWeightGrads g = conv2d_backward_weights(ctx_, c.p, to_tensor(x, c.x, format), to_tensor(dy, ys, format), c.w,
                                              c.bias);
  EXPECT_LT(rel_error(to_vec(g.dw), conv2d_backward_weights_ref(c.p, x, c.x, dy, c.w)), 1e-4);
  if (c.bias) {
    Vec db(static_cast<size_t>(c.w[0]), 0.0);
    int64_t plane = ys[2] * ys[3];
    for (size_t i = 0; i < dy.size(); ++i) db[static_cast<size_t>((static_cast<int64_t>(i) / plane) % ys[1])] += dy[i];
    EXPECT_LT(rel_error(to_vec(g.db), db), 1e-4);
  }
}

// dx_sum += backward data: into a sum in dy's format (one pass where the kernel can) and in the
// other format (a separate part, then the add).
TEST_P(ConvTest, BackwardDataAddsIntoASum) {
  const auto& [c, format] = GetParam();
  Shape ys = conv2d_output_shape(c.p, c.x, c.w);
  Vec w = random_vec(static_cast<size_t>(c.w.numel()), 2);
  Vec dy = random_vec(static_cast<size_t>(ys.numel()), 4);
  Vec before = random_vec(static_cast<size_t>(c.x.numel()), 7);
  Vec want = conv2d_backward_data_ref(c.p, dy, w, c.w, c.x);
  for (size_t i = 0; i < want.size(); ++i) want[i] += before[i];
  for (MemoryFormat sum_format : {format, format == MemoryFormat::kContiguous ? MemoryFormat::kChannelsLast
                                                                             : MemoryFormat::kContiguous}) {
    Tensor sum = to_tensor(before, c.x, sum_format);
    conv2d_backward_data_add(ctx_, c.p, to_tensor(dy, ys, format), to_tensor(w, c.w), sum);
    EXPECT_EQ(sum.format(), sum_format);
    EXPECT_LT(rel_error(to_vec(sum), want), 1e-4) << memory_format_name(sum_format);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvTest,
                         ::testing::Combine(::testing::ValuesIn(all_cases()),
                                            ::testing::Values(MemoryFormat::kContiguous,
                                                              MemoryFormat::kChannelsLast)));

// Gradients of sum(r * conv(x, w) + b) by finite differences of the double reference.
class ConvGradientTest : public ::testing::TestWithParam<std::tuple<ConvCase, MemoryFormat>> {
 protected:
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_P(ConvGradientTest, MatchesFiniteDifferences) {
  const auto& [c, format] = GetParam();
  Shape ys = conv2d_output_shape(c.p, c.x, c.w);
  Vec x = random_vec(static_cast<size_t>(c.x.numel()), 11);
  Vec w = random_vec(static_cast<size_t>(c.w.numel()), 12);
  Vec b = random_vec(static_cast<size_t>(c.w[0]), 13);
  Vec r = random_vec(static_cast<size_t>(ys.numel()), 14);

  Vec fd_x = fd_gradient([&](const Vec& xv) { return conv2d_ref(c.p, xv, c.x, w, c.w, b); }, x, r);
  Vec fd_w = fd_gradient([&](const Vec& wv) { return conv2d_ref(c.p, x, c.x, wv, c.w, b); }, w, r);
  Vec fd_b = fd_gradient([&](const Vec& bv) { return conv2d_ref(c.p, x, c.x, w, c.w, bv); }, b, r);

  Tensor dy = to_tensor(r, ys, format);
  Tensor dx = conv2d_backward_data(ctx_, c.p, dy, to_tensor(w, c.w), c.x);
  ConvWeightGrads g = conv2d_backward_weights(ctx_, c.p, to_tensor(x, c.x, format), dy, c.w, true);
  EXPECT_LT(rel_norm_error(to_vec(dx), fd_x), 1e-3);
  EXPECT_LT(rel_norm_error(to_vec(g.dw), fd_w), 1e-3);
  EXPECT_LT(rel_norm_error(to_vec(g.db), fd_b), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvGradientTest,
                         ::testing::Combine(::testing::ValuesIn(gradient_cases()),
                                            ::testing::Values(MemoryFormat::kContiguous,
                                                              MemoryFormat::kChannelsLast)));

TEST(Conv, WeightsInChannelsLastGiveTheSameResult) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  Conv2dParams p = params(1, 1, 1, 1, 1, 1, 1);
  Shape xs{2, 5, 7, 8}, ws{3, 5, 3, 3};  // a plane over 7x7: backward data turns the ohwi weights
  Vec x = random_vec(static_cast<size_t>(xs.numel()), 5);
  Vec w = random_vec(static_cast<size_t>(ws.numel()), 6);
  Tensor y = conv2d_forward(ctx, p, to_tensor(x, xs), to_tensor(w, ws, MemoryFormat::kChannelsLast));
  EXPECT_LT(rel_error(to_vec(y), conv2d_ref(p, x, xs, w, ws, {})), 1e-4);
  Shape ys = y.shape();
  Vec dy = random_vec(static_cast<size_t>(ys.numel()), 7);
  Tensor dx = conv2d_backward_data(ctx, p, to_tensor(dy, ys), to_tensor(w, ws, MemoryFormat::kChannelsLast), xs);
  EXPECT_LT(rel_error(to_vec(dx), conv2d_backward_data_ref(p, dy, w, ws, xs)), 1e-4);
}

// An empty batch (the last batch of a tiny shard) gives empty activations' gradients and zero
// weight gradients, through both backward-data paths.
TEST(Conv, AnEmptyBatchGivesEmptyGradients) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  for (int64_t plane : {5, 8}) {
    Conv2dParams p = params(1, 1, 1, 1, 1, 1, 1);
    Shape xs{0, 4, plane, plane}, ws{6, 4, 3, 3};
    Tensor x = Tensor::empty(xs, DType::kF32, Device::cpu(), MemoryFormat::kChannelsLast);
    Tensor w = to_tensor(random_vec(static_cast<size_t>(ws.numel()), 3), ws);
    Tensor y = conv2d_forward(ctx, p, x, w);
    EXPECT_EQ(y.shape(), Shape({0, 6, plane, plane}));
    EXPECT_EQ(conv2d_backward_data(ctx, p, y, w, xs).shape(), xs);
    conv2d_backward_data_add(ctx, p, y, w, x);
    ConvWeightGrads g = conv2d_backward_weights(ctx, p, x, y, ws, false);
    for (float v : g.dw.to_vector()) ASSERT_EQ(v, 0.0f) << "plane " << plane;
  }
}

}  // namespace
}  // namespace tandem::backend::testing
