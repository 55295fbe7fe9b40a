// Which convolutions run as im2col + matmul (cpu_conv_gemm.h), that they really run on oneDNN's
// matmul, and that they agree with the reference with the weights in either layout, in f32 and in
// bf16. conv_test.cpp's and bf16_test.cpp's small-plane channels_last cases check them too.
#include <gtest/gtest.h>

#include <string>

#include "backend_test_util.h"
#include "engine/backend/cpu/cpu_conv_gemm.h"
#include "onednn_log.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::backend::testing {
namespace {

using cpu::conv_gemm_suits;

constexpr MemoryFormat kLast = MemoryFormat::kChannelsLast, kPlain = MemoryFormat::kContiguous;

Conv2dParams padded(int64_t stride, int64_t pad, int64_t dilation = 1) {
  Conv2dParams p;
  p.stride = {stride, stride};
  p.padding = {pad, pad};
  p.dilation = {dilation, dilation};
  return p;
}

bool suits(const Conv2dParams& p, const Shape& x, const Shape& w, MemoryFormat format = kLast) {
  const Tensor xt = Tensor::empty(x, DType::kF32, Device::cpu(), format);
  const Tensor yt = Tensor::empty(conv2d_output_shape(p, x, w), DType::kF32, Device::cpu(), format);
  return conv_gemm_suits(p, xt, w, yt);
}

TEST(ConvGemmSuits, ChannelsLastOutputPlanesOfFourByFourAndLess) {
  EXPECT_TRUE(suits(padded(1, 1), {32, 512, 2, 2}, {512, 512, 3, 3}));  // ResNet-18's last stage
  EXPECT_TRUE(suits(padded(1, 1), {32, 256, 4, 4}, {256, 256, 3, 3}));
  EXPECT_TRUE(suits(padded(2, 1), {32, 256, 4, 4}, {512, 256, 3, 3}));  // into 2x2
  EXPECT_TRUE(suits(padded(2, 0), {32, 256, 4, 4}, {512, 256, 1, 1}));  // the projection shortcut
  EXPECT_TRUE(suits(padded(2, 2, 2), {2, 6, 7, 7}, {5, 6, 3, 3}));      // dilated: 4x4
  EXPECT_FALSE(suits(padded(1, 1), {32, 128, 8, 8}, {128, 128, 3, 3}));   // 8x8: the direct kernels
  EXPECT_FALSE(suits(padded(1, 1), {128, 64, 7, 7}, {64, 64, 3, 3}));     // ResNet-20's 7x7
  EXPECT_FALSE(suits(padded(1, 1), {32, 512, 2, 2}, {512, 512, 3, 3}, kPlain));  // nchw: strided rows
  Conv2dParams grouped = padded(1, 1);
  grouped.groups = 2;
  EXPECT_FALSE(suits(grouped, {2, 64, 4, 4}, {64, 32, 3, 3}));
  EXPECT_FALSE(suits(padded(1, 1), {0, 64, 4, 4}, {64, 64, 3, 3}));  // an empty batch
  EXPECT_FALSE(suits(padded(1, 1), {65536, 64, 4, 4}, {64, 64, 3, 3}));  // a patch matrix of 604 M elements
}

TEST(ConvGemm, EveryPassRunsOnOneDnnsMatmul) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  const Conv2dParams p = padded(1, 1);
  const Shape xs{2, 32, 4, 4}, ws{48, 32, 3, 3}, ys{2, 48, 4, 4};
  Tensor x = to_tensor(random_vec(static_cast<size_t>(xs.numel()), 1), xs, kLast);
  Tensor w = to_tensor(random_vec(static_cast<size_t>(ws.numel()), 2), ws);
  Tensor dy = to_tensor(random_vec(static_cast<size_t>(ys.numel()), 3), ys, kLast);
  Tensor sum = to_tensor(random_vec(static_cast<size_t>(xs.numel()), 4), xs, kLast);
  const std::string log = onednn_log([&] {
    conv2d_forward(ctx, p, x, w, Tensor());
    conv2d_backward_data(ctx, p, dy, w, xs);
    conv2d_backward_data_add(ctx, p, dy, w, sum);
    conv2d_backward_weights(ctx, p, x, dy, ws, false);
  });
  if (log.empty()) GTEST_SKIP() << "this oneDNN was built without its verbose log";
  EXPECT_EQ(primitive_line(log, "convolution", ""), "") << log;
  for (const char* shape : {"32x288:288x48:32x48", "32x48:48x288:32x288", "48x32:32x288:48x288"}) {
    EXPECT_NE(log.find(shape), std::string::npos) << shape << " in\n" << log;
  }
}

struct Passes {
  Vec y, dx, dx_added, dw, db;
};

Passes run_passes(ExecutionContext& ctx, const Conv2dParams& p, const Vec& x, const Shape& xs, const Vec& w,
                  const Shape& ws, MemoryFormat w_format, const Vec& b, const Vec& dy, const Vec& base) {
  const Shape ys = conv2d_output_shape(p, xs, ws);
  Tensor tx = to_tensor(x, xs, kLast), tw = to_tensor(w, ws, w_format), tdy = to_tensor(dy, ys, kLast);
  Passes out;
  out.y = to_vec(conv2d_forward(ctx, p, tx, tw, to_tensor(b, {ws[0]})));
  out.dx = to_vec(conv2d_backward_data(ctx, p, tdy, tw, xs));
  Tensor sum = to_tensor(base, xs, kLast);
  conv2d_backward_data_add(ctx, p, tdy, tw, sum);
  out.dx_added = to_vec(sum);
  ConvWeightGrads g = conv2d_backward_weights(ctx, p, tx, tdy, ws, true);
  out.dw = to_vec(g.dw);
  out.db = to_vec(g.db);
  return out;
}

// Strided, padded and dilated, with a bias, the weights in oihw and in ohwi: each pass against the
// double reference, to f32's accuracy, or to bf16's under precision: bf16.
TEST(ConvGemm, BothWeightLayoutsMatchTheReferenceInF32AndBf16) {
  const Conv2dParams p = padded(2, 2, 2);
  const Shape xs{3, 12, 7, 7}, ws{20, 12, 3, 3};
  ASSERT_TRUE(suits(p, xs, ws));
  const Shape ys = conv2d_output_shape(p, xs, ws);
  const Vec x = random_vec(static_cast<size_t>(xs.numel()), 21), w = random_vec(static_cast<size_t>(ws.numel()), 22);
  const Vec b = random_vec(static_cast<size_t>(ws[0]), 23), dy = random_vec(static_cast<size_t>(ys.numel()), 24);
  const Vec base = random_vec(static_cast<size_t>(xs.numel()), 25);
  Vec dx_added = conv2d_backward_data_ref(p, dy, w, ws, xs);
  for (size_t i = 0; i < dx_added.size(); ++i) dx_added[i] += base[i];
  Vec db(static_cast<size_t>(ws[0]), 0.0);
  for (size_t i = 0; i < dy.size(); ++i) db[i / static_cast<size_t>(ys[2] * ys[3]) % db.size()] += dy[i];
  const Passes want{conv2d_ref(p, x, xs, w, ws, b), conv2d_backward_data_ref(p, dy, w, ws, xs), dx_added,
                    conv2d_backward_weights_ref(p, x, xs, dy, ws), db};
  const bool bf16_runs = probe_cpu().runs_bf16();
  for (Precision precision : {Precision::kF32, Precision::kBf16}) {
    if (precision == Precision::kBf16 && !bf16_runs) continue;
    ExecutionContext ctx(Device::cpu(), 2, 1, KernelOptions{false, false, precision});
    const double tolerance = precision == Precision::kBf16 ? 2e-2 : 1e-5;
    for (MemoryFormat w_format : {kPlain, kLast}) {
      const Passes got = run_passes(ctx, p, x, xs, w, ws, w_format, b, dy, base);
      SCOPED_TRACE(std::string(precision == Precision::kBf16 ? "bf16" : "fp32") + ", weights " +
                   std::string(memory_format_name(w_format)));
      EXPECT_LT(rel_norm_error(got.y, want.y), tolerance);
      EXPECT_LT(rel_norm_error(got.dx, want.dx), tolerance);
      EXPECT_LT(rel_norm_error(got.dx_added, want.dx_added), tolerance);
      EXPECT_LT(rel_norm_error(got.dw, want.dw), tolerance);
      EXPECT_LT(rel_norm_error(got.db, want.db), 1e-5);  // summed from dy in double, in both precisions
    }
  }
}

}  // namespace
}  // namespace tandem::backend::testing
