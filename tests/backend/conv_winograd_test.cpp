// Which convolutions go to oneDNN's Winograd kernels, and that they really run there: oneDNN's
// verbose log names the kernel of every primitive it executes. The numbers themselves are checked
// against the reference by conv_test.cpp's Winograd cases.
#include <gtest/gtest.h>

#include <string>

#include "backend_test_util.h"
#include "onednn_log.h"
#include "engine/backend/cpu/cpu_conv_winograd.h"

namespace tandem::backend::testing {
namespace {

using cpu::winograd_suits;

constexpr MemoryFormat kLast = MemoryFormat::kChannelsLast, kPlain = MemoryFormat::kContiguous;

Conv2dParams same_3x3() {
  Conv2dParams p;
  p.padding = {1, 1};
  return p;
}

TEST(WinogradSuits, ThreeByThreeStrideOneFromOneHundredTwentyEightChannelsOrSixtyFourOnEightByEight) {
  const Conv2dParams p = same_3x3();
  EXPECT_TRUE(winograd_suits(p, {32, 64, 16, 16}, {64, 64, 3, 3}));  // ResNet-18's stages
  EXPECT_TRUE(winograd_suits(p, {32, 128, 8, 8}, {128, 128, 3, 3}));
  EXPECT_TRUE(winograd_suits(p, {32, 256, 4, 4}, {256, 256, 3, 3}));
  EXPECT_TRUE(winograd_suits(p, {32, 128, 6, 6}, {256, 128, 3, 3}));
  EXPECT_FALSE(winograd_suits(p, {32, 512, 2, 2}, {512, 512, 3, 3}));  // 2x2: a wasted tile
  // ResNet-20's stages: the step was no faster
  EXPECT_FALSE(winograd_suits(p, {128, 16, 28, 28}, {16, 16, 3, 3}));
  EXPECT_FALSE(winograd_suits(p, {128, 32, 14, 14}, {32, 32, 3, 3}));
  EXPECT_FALSE(winograd_suits(p, {128, 64, 7, 7}, {64, 64, 3, 3}));
  EXPECT_FALSE(winograd_suits(p, {32, 32, 16, 16}, {64, 32, 3, 3}));       // 32 channels in
  EXPECT_FALSE(winograd_suits(p, {32, 144, 8, 8}, {136, 144, 3, 3}));      // 136: not a multiple of 16
  Conv2dParams unpadded;
  EXPECT_TRUE(winograd_suits(unpadded, {32, 128, 6, 6}, {128, 128, 3, 3}));   // a 4x4 output
  EXPECT_FALSE(winograd_suits(unpadded, {32, 128, 5, 6}, {128, 128, 3, 3}));  // 3x4
  Conv2dParams strided = p;
  strided.stride = {2, 2};
  EXPECT_FALSE(winograd_suits(strided, {32, 128, 16, 16}, {128, 128, 3, 3}));
  Conv2dParams dilated = p;
  dilated.dilation = {2, 2};
  EXPECT_FALSE(winograd_suits(dilated, {32, 128, 16, 16}, {128, 128, 3, 3}));
  Conv2dParams wide = p;
  wide.padding = {2, 2};
  EXPECT_FALSE(winograd_suits(wide, {32, 128, 16, 16}, {128, 128, 3, 3}));
  Conv2dParams grouped = p;
  grouped.groups = 2;
  EXPECT_FALSE(winograd_suits(grouped, {32, 256, 16, 16}, {256, 128, 3, 3}));
  EXPECT_FALSE(winograd_suits(unpadded, {32, 128, 16, 16}, {128, 128, 1, 1}));  // 1x1
  EXPECT_FALSE(winograd_suits(p, {0, 128, 16, 16}, {128, 128, 3, 3}));         // empty batch
}

std::string convolution_line(const std::string& log, const std::string& prop) {
  return primitive_line(log, "convolution", prop);
}

TEST(ConvWinograd, TheChosenPassesRunOnTheWinogradKernelInBothFormats) {
  if (!has_avx512_core()) GTEST_SKIP() << "oneDNN's Winograd kernels need AVX-512; this CPU has none";
  ExecutionContext ctx(Device::cpu(), 2, 1);
  const Conv2dParams p = same_3x3();
  struct Case {
    Shape xs, ws;
    MemoryFormat format;
  };
  for (const auto& [xs, ws, format] : {Case{{2, 64, 8, 8}, {64, 64, 3, 3}, kPlain},
                                       Case{{2, 64, 8, 8}, {64, 64, 3, 3}, kLast},
                                       Case{{1, 128, 6, 6}, {128, 128, 3, 3}, kLast}}) {
    Tensor x = to_tensor(random_vec(static_cast<size_t>(xs.numel()), 1), xs, format);
    Tensor w = to_tensor(random_vec(static_cast<size_t>(ws.numel()), 2), ws);
    Tensor dy = to_tensor(random_vec(static_cast<size_t>(xs.numel()), 3), xs, format);
    Tensor sum = to_tensor(random_vec(static_cast<size_t>(xs.numel()), 4), xs, format);
    std::string log = onednn_log([&] {
      conv2d_forward(ctx, p, x, w, Tensor());
      conv2d_backward_data(ctx, p, dy, w, xs);
      conv2d_backward_data_add(ctx, p, dy, w, sum);
      conv2d_backward_weights(ctx, p, x, dy, ws, false);
    });
    if (log.empty()) GTEST_SKIP() << "this oneDNN was built without its verbose log";
    for (const char* prop : {"forward_training", "backward_data", "backward_weights"}) {
      EXPECT_NE(convolution_line(log, prop).find("wino"), std::string::npos)
          << prop << " of " << xs.str() << " in " << memory_format_name(format) << ":\n" << log;
    }
  }
}

TEST(ConvWinograd, OtherShapesKeepTheDirectKernels) {
  if (!has_avx512_core()) GTEST_SKIP() << "oneDNN's Winograd kernels need AVX-512; this CPU has none";
  ExecutionContext ctx(Device::cpu(), 2, 1);
  const Conv2dParams p = same_3x3();
  const Shape xs{2, 64, 7, 7}, ws{64, 64, 3, 3};  // 64 channels at 7x7: direct
  Tensor x = to_tensor(random_vec(static_cast<size_t>(xs.numel()), 1), xs, kLast);
  Tensor w = to_tensor(random_vec(static_cast<size_t>(ws.numel()), 2), ws);
  std::string log = onednn_log([&] { conv2d_forward(ctx, p, x, w, Tensor()); });
  if (log.empty()) GTEST_SKIP() << "this oneDNN was built without its verbose log";
  std::string line = convolution_line(log, "forward_training");
  ASSERT_FALSE(line.empty()) << log;
  EXPECT_EQ(line.find("wino"), std::string::npos) << line;
}

}  // namespace
}  // namespace tandem::backend::testing
