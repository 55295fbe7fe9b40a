// precision: bf16 on the CPU: convolutions and matmuls take their operands rounded to bf16 and
// accumulate in f32. Each is held twice: to the double reference of the *rounded* operands, which
// it must match to f32 accuracy (so the products are really bf16 x bf16 summed in f32), and to the
// reference of the exact operands, within bf16's tolerance and visibly apart from it (so the
// rounding really happened).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend_test_util.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::backend::testing {
namespace {

constexpr double kAccumulation = 2e-5;  // f32 sums of exact bf16 products, against double
constexpr double kBf16 = 2e-2;          // operands rounded to 8 significant bits

Vec rounded(const Vec& v) {
  Vec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(float_to_bf16(static_cast<float>(v[i])));
  return out;
}

ExecutionContext& bf16_context() { return tandem::testing::bf16_cpu_context(); }

// got is the bf16 result of exact-operand reference `exact` and rounded-operand reference `of_rounded`.
void expect_bf16_result(const Vec& got, const Vec& of_rounded, const Vec& exact) {
  EXPECT_LT(rel_norm_error(got, of_rounded), kAccumulation);
  const double from_exact = rel_norm_error(got, exact);
  EXPECT_LT(from_exact, kBf16);
  EXPECT_GT(from_exact, 1e-4) << "no sign of bf16 rounding";
}

Conv2dParams conv_params(int64_t stride, int64_t pad) {
  Conv2dParams p;
  p.stride = {stride, stride};
  p.padding = {pad, pad};
  return p;
}

struct ConvCase {
  Shape x, w;
  Conv2dParams p;
  MemoryFormat format;
};

class Bf16Conv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Bf16Conv, EveryPassIsBf16ProductsSummedInF32) {
  TANDEM_REQUIRE_BF16_CPU();
  const ConvCase& c = GetParam();
  ExecutionContext& ctx = bf16_context();
  const int64_t k = c.w[0];
  Vec x = random_vec(static_cast<size_t>(numel(c.x)), 11), w = random_vec(static_cast<size_t>(numel(c.w)), 12);
  Vec b = random_vec(static_cast<size_t>(k), 13);
  Tensor tx = to_tensor(x, c.x, c.format), tw = to_tensor(w, c.w, c.format), tb = to_tensor(b, {k});
  Tensor y = conv2d_forward(ctx, c.p, tx, tw, tb);
  expect_bf16_result(to_vec(y), conv2d_ref(c.p, rounded(x), c.x, rounded(w), c.w, b),
                     conv2d_ref(c.p, x, c.x, w, c.w, b));

  Vec dy = random_vec(static_cast<size_t>(y.numel()), 14);
  Tensor tdy = to_tensor(dy, y.shape(), c.format);
  Tensor dx = conv2d_backward_data(ctx, c.p, tdy, tw, c.x);
  expect_bf16_result(to_vec(dx), conv2d_backward_data_ref(c.p, rounded(dy), rounded(w), c.w, c.x),
                     conv2d_backward_data_ref(c.p, dy, w, c.w, c.x));

  Vec start = random_vec(static_cast<size_t>(numel(c.x)), 15);
  Tensor sum = to_tensor(start, c.x, c.format);
  conv2d_backward_data_add(ctx, c.p, tdy, tw, sum);
  Vec want = conv2d_backward_data_ref(c.p, rounded(dy), rounded(w), c.w, c.x);
  for (size_t i = 0; i < want.size(); ++i) want[i] += start[i];
  EXPECT_LT(rel_norm_error(to_vec(sum), want), kAccumulation);

  ConvWeightGrads g = conv2d_backward_weights(ctx, c.p, tx, tdy, c.w, true);
  expect_bf16_result(to_vec(g.dw), conv2d_backward_weights_ref(c.p, rounded(x), c.x, rounded(dy), c.w),
                     conv2d_backward_weights_ref(c.p, x, c.x, dy, c.w));
  EXPECT_EQ(g.dw.dtype(), DType::kF32);
  EXPECT_EQ(y.dtype(), DType::kF32);
  EXPECT_EQ(dx.dtype(), DType::kF32);

  // Operands rounded once by the caller (bf16_operand, as autograd does) give the same bits.
  Tensor x16 = bf16_operand(ctx, tx), dy16 = bf16_operand(ctx, tdy);
  ASSERT_EQ(x16.dtype(), DType::kBF16);
  EXPECT_EQ(x16.format(), c.format);
  EXPECT_EQ(conv2d_forward(ctx, c.p, x16, tw, tb).to_vector(), y.to_vector());
  EXPECT_EQ(conv2d_backward_data(ctx, c.p, dy16, tw, c.x).to_vector(), dx.to_vector());
  EXPECT_EQ(conv2d_backward_weights(ctx, c.p, x16, dy16, c.w, true).dw.to_vector(), g.dw.to_vector());

  // bf16_output (a training batch norm's x): without a bias, the f32 result rounded once; with one, f32.
  Tensor y_plain = conv2d_forward(ctx, c.p, x16, tw);
  Tensor y16 = conv2d_forward(ctx, c.p, x16, tw, {}, true);
  ASSERT_EQ(y16.dtype(), DType::kBF16);
  EXPECT_EQ(y16.format(), c.format);
  const std::vector<float> plain = y_plain.to_vector();  // logical order, as the widened copy below
  Tensor y16_widened = Tensor::empty(y16.shape(), DType::kF32, Device::cpu(), y16.format());
  widen_from_bf16(ctx, y16, y16_widened);
  const std::vector<float> got16 = y16_widened.to_vector();
  int64_t wrong = 0;
  for (size_t i = 0; i < plain.size(); ++i) wrong += got16[i] != bf16_to_float(float_to_bf16(plain[i]));
  EXPECT_EQ(wrong, 0) << "of " << plain.size() << " bf16 outputs are not the f32 output rounded";
  EXPECT_EQ(conv2d_forward(ctx, c.p, x16, tw, tb, true).dtype(), DType::kF32);
}

TEST(Bf16Operand, RoundsToNearestEvenKeepsNaNAndIsRefusedOutsideBf16) {
  ExecutionContext& ctx = bf16_context();
  std::vector<float> values{1.0f, 1.00390625f, 1.01171875f, -3.14159f, 65504.0f, std::nanf(""), -0.0f, 1e-30f};
  for (int i = 0; i < 100; ++i) values.push_back(0.37f * static_cast<float>(i) - 11.0f);  // past one 16-wide vector
  Tensor x = Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
  Tensor x16 = bf16_operand(ctx, x);
  ASSERT_EQ(x16.dtype(), DType::kBF16);
  const auto* bits = static_cast<const uint16_t*>(x16.raw_data());
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      EXPECT_TRUE(std::isnan(bf16_to_float(BFloat16{bits[i]}))) << i;
    } else {
      EXPECT_EQ(bits[i], float_to_bf16(values[i]).bits) << values[i];  // -0.0 too (no denormals here)
    }
  }
  ExecutionContext f32_ctx(Device::cpu(), 2, 1);
  EXPECT_EQ(bf16_operand(f32_ctx, x).dtype(), DType::kF32);  // an fp32 context rounds nothing
  Tensor x4 = to_tensor(random_vec(64, 51), {1, 4, 4, 4});
  expect_error([&] { conv2d_forward(f32_ctx, {}, bf16_operand(ctx, x4), to_tensor(random_vec(16, 52), {1, 4, 2, 2})); },
               ErrorCode::kInvalidArgument, {"conv2d_forward", "x must be f32"});
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Bf16Conv,
    ::testing::Values(ConvCase{{2, 3, 9, 9}, {8, 3, 3, 3}, conv_params(1, 1), MemoryFormat::kContiguous},
                      ConvCase{{2, 16, 10, 10}, {16, 16, 3, 3}, conv_params(1, 1), MemoryFormat::kChannelsLast},
                      ConvCase{{2, 16, 9, 9}, {32, 16, 3, 3}, conv_params(2, 1), MemoryFormat::kChannelsLast},
                      ConvCase{{3, 32, 8, 8}, {64, 32, 1, 1}, conv_params(2, 0), MemoryFormat::kChannelsLast},
                      ConvCase{{2, 5, 7, 7}, {6, 5, 5, 5}, conv_params(1, 2), MemoryFormat::kContiguous},
                      // output planes of 4x4 and less: im2col + matmul (cpu_conv_gemm.h)
                      ConvCase{{2, 32, 4, 4}, {48, 32, 3, 3}, conv_params(1, 1), MemoryFormat::kChannelsLast},
                      ConvCase{{3, 16, 7, 7}, {24, 16, 3, 3}, conv_params(2, 1), MemoryFormat::kChannelsLast}));

TEST(Bf16Linear, ForwardAndBothBackwardsAreBf16ProductsSummedInF32) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext& ctx = bf16_context();
  const int64_t n = 24, in = 70, out = 33;
  Vec x = random_vec(static_cast<size_t>(n * in), 21), w = random_vec(static_cast<size_t>(out * in), 22);
  Vec dy = random_vec(static_cast<size_t>(n * out), 23);
  Tensor tx = to_tensor(x, {n, in}), tw = to_tensor(w, {out, in}), tdy = to_tensor(dy, {n, out});
  Tensor y = linear_forward(ctx, tx, tw);
  expect_bf16_result(to_vec(y), matmul_ref(rounded(x), transpose(rounded(w), out, in), n, in, out),
                     matmul_ref(x, transpose(w, out, in), n, in, out));
  Tensor dx = linear_backward_data(ctx, tdy, tw);
  expect_bf16_result(to_vec(dx), matmul_ref(rounded(dy), rounded(w), n, out, in), matmul_ref(dy, w, n, out, in));
  LinearWeightGrads g = linear_backward_weights(ctx, tx, tdy, true);
  expect_bf16_result(to_vec(g.dw), matmul_ref(transpose(rounded(dy), n, out), rounded(x), out, n, in),
                     matmul_ref(transpose(dy, n, out), x, out, n, in));
  Vec db(static_cast<size_t>(out), 0.0);  // the bias gradient is a sum of f32 values: no rounding
  for (size_t i = 0; i < dy.size(); ++i) db[i % static_cast<size_t>(out)] += dy[i];
  EXPECT_LT(rel_error(to_vec(g.db), db), 1e-6);
}

TEST(Bf16Matmul, BatchedProductsOfEveryTranspose) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext& ctx = bf16_context();
  const int64_t batch = 3, m = 17, k = 40, n = 9;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Vec a = random_vec(static_cast<size_t>(batch * m * k), 31);
      Vec b = random_vec(static_cast<size_t>(batch * k * n), 32);
      Vec of_rounded, exact;
      Vec sa, sb;  // stored transposed when asked
      for (int64_t i = 0; i < batch; ++i) {
        Vec ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
        Vec bi(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
        Vec r = matmul_ref(rounded(ai), rounded(bi), m, k, n), e = matmul_ref(ai, bi, m, k, n);
        of_rounded.insert(of_rounded.end(), r.begin(), r.end());
        exact.insert(exact.end(), e.begin(), e.end());
        Vec si = ta ? transpose(ai, m, k) : ai, ti = tb ? transpose(bi, k, n) : bi;
        sa.insert(sa.end(), si.begin(), si.end());
        sb.insert(sb.end(), ti.begin(), ti.end());
      }
      Tensor c = matmul_nd(ctx, to_tensor(sa, ta ? Shape{batch, k, m} : Shape{batch, m, k}),
                           to_tensor(sb, tb ? Shape{batch, n, k} : Shape{batch, k, n}), ta, tb);
      SCOPED_TRACE(::testing::Message() << "ta " << ta << " tb " << tb);
      expect_bf16_result(to_vec(c), of_rounded, exact);
    }
  }
}

TEST(Bf16Precision, Fp32ContextsAreUntouched) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  Tensor cx = to_tensor(random_vec(2 * 3 * 5 * 5, 40), {2, 3, 5, 5}), cw = to_tensor(random_vec(4 * 3 * 9, 43), {4, 3, 3, 3});
  EXPECT_EQ(conv2d_forward(ctx, conv_params(1, 1), cx, cw, {}, true).dtype(), DType::kF32);  // bf16_output needs bf16
  const int64_t n = 8, in = 30, out = 5;
  Vec x = random_vec(static_cast<size_t>(n * in), 41), w = random_vec(static_cast<size_t>(out * in), 42);
  Tensor y = linear_forward(ctx, to_tensor(x, {n, in}), to_tensor(w, {out, in}));
  EXPECT_LT(rel_norm_error(to_vec(y), matmul_ref(x, transpose(w, out, in), n, in, out)), 1e-6);
}

}  // namespace
}  // namespace tandem::backend::testing
