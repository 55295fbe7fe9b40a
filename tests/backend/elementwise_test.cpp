// ReLU, add, mul, scale, axpy, fill, sum and dropout against plain references, in both memory
// formats where the op takes 4-D tensors; gradients of ReLU, mul and dropout by finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "backend_test_util.h"

namespace tandem::backend::testing {
namespace {

Vec map(const Vec& a, double (*f)(double)) {
  Vec y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = f(a[i]);
  return y;
}

double relu(double v) { return v > 0.0 ? v : 0.0; }

class ElementwiseTest : public ::testing::TestWithParam<MemoryFormat> {
 protected:
  ExecutionContext ctx_{Device::cpu(), 2, 1};
  Shape shape_{3, 5, 7, 9};  // odd sizes, and NHWC order differs from NCHW
  size_t n_ = 3 * 5 * 7 * 9;
};

TEST_P(ElementwiseTest, ArithmeticMatchesReference) {
  Vec a = random_vec(n_, 1), b = random_vec(n_, 2);
  Tensor ta = to_tensor(a, shape_, GetParam()), tb = to_tensor(b, shape_, GetParam());
  Vec sum_ab(n_), prod(n_), scaled(n_), ax(n_);
  for (size_t i = 0; i < n_; ++i) {
    sum_ab[i] = a[i] + b[i];
    prod[i] = a[i] * b[i];
    scaled[i] = static_cast<double>(-0.5f) * a[i];
    ax[i] = b[i] + static_cast<double>(0.25f) * a[i];
  }
  EXPECT_LT(rel_error(to_vec(add(ctx_, ta, tb)), sum_ab), 1e-6);
  EXPECT_LT(rel_error(to_vec(mul(ctx_, ta, tb)), prod), 1e-6);
  EXPECT_LT(rel_error(to_vec(scale(ctx_, ta, -0.5f)), scaled), 1e-6);
  axpy(ctx_, 0.25f, ta, tb);
  EXPECT_LT(rel_error(to_vec(tb), ax), 1e-6);
  fill(ctx_, 3.5f, tb);
  EXPECT_EQ(to_vec(tb), Vec(n_, 3.5));
  EXPECT_EQ(add(ctx_, ta, ta).format(), GetParam());
}

TEST_P(ElementwiseTest, ReluAndItsGradient) {
  Vec x = random_vec(n_, 3), r = random_vec(n_, 4);
  Tensor tx = to_tensor(x, shape_, GetParam());
  Tensor y = relu_forward(ctx_, tx);
  EXPECT_EQ(y.format(), GetParam());
  EXPECT_LT(rel_error(to_vec(y), map(x, relu)), 1e-7);
  Tensor dx = relu_backward(ctx_, y, to_tensor(r, shape_, GetParam()));
  Vec fd = fd_gradient([](const Vec& v) { return map(v, relu); }, x, r, 1e-7);
  EXPECT_LT(rel_norm_error(to_vec(dx), fd), 1e-3);
}

TEST_P(ElementwiseTest, ReluBackwardPassesDyExactlyWhereYIsPositive) {
  // Above the parallel grain, with a count that is no multiple of 16 (the vector loop's tail), NaN
  // and both zeros in y: dx is dy or 0 exactly.
  const Shape shape{2, 17, 33, 31};
  const auto n = static_cast<size_t>(shape.numel());
  Vec y = random_vec(n, 10), dy = random_vec(n, 11);
  y[0] = std::numeric_limits<double>::quiet_NaN();
  y[1] = -0.0;
  y[n - 1] = 0.0;
  y[n - 2] = 1e-30;
  Vec dx = to_vec(relu_backward(ctx_, to_tensor(y, shape, GetParam()), to_tensor(dy, shape, GetParam())));
  ASSERT_EQ(dx.size(), n);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const float want = static_cast<float>(y[i]) > 0.0f ? static_cast<float>(dy[i]) : 0.0f;
    if (dx[i] != static_cast<double>(want)) ++wrong;
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(dx[n - 2], static_cast<double>(static_cast<float>(dy[n - 2])));
}

TEST_P(ElementwiseTest, AddReluIsReluOfTheSumBitForBit) {
  // The fused kernel must give what the unfused pair gives, to the bit, or fused and unfused
  // models would drift apart; NaN (whatever relu_forward makes of it) and both signs of zero included.
  Vec a = random_vec(n_, 8), b = random_vec(n_, 9);
  a[0] = std::numeric_limits<double>::quiet_NaN();
  a[1] = -0.0;
  b[1] = 0.0;
  a[2] = -b[2];
  Tensor ta = to_tensor(a, shape_, GetParam()), tb = to_tensor(b, shape_, GetParam());
  Tensor fused = add_relu(ctx_, ta, tb);
  Tensor plain = relu_forward(ctx_, add(ctx_, ta, tb));
  EXPECT_EQ(fused.format(), GetParam());
  ASSERT_EQ(fused.nbytes(), plain.nbytes());
  EXPECT_EQ(std::memcmp(fused.raw_data(), plain.raw_data(), fused.nbytes()), 0);
}

TEST_P(ElementwiseTest, MulGradientMatchesFiniteDifferences) {
  // d/da sum(r * a * b) = r * b: the autograd layer builds mul's backward from mul itself.
  Vec a = random_vec(n_, 5), b = random_vec(n_, 6), r = random_vec(n_, 7);
  Vec fd = fd_gradient(
      [&](const Vec& v) {
        Vec y(v.size());
        for (size_t i = 0; i < v.size(); ++i) y[i] = v[i] * b[i];
        return y;
      },
      a, r);
  Tensor da = mul(ctx_, to_tensor(r, shape_, GetParam()), to_tensor(b, shape_, GetParam()));
  EXPECT_LT(rel_norm_error(to_vec(da), fd), 1e-3);
}

TEST_P(ElementwiseTest, DropoutScalesKeptElementsAndRepeatsWithTheSeed) {
  Vec x = random_vec(n_, 8, 0.5, 1.5), r = random_vec(n_, 9);
  Tensor tx = to_tensor(x, shape_, GetParam());
  float p = 0.3f;
  ExecutionContext a(Device::cpu(), 2, 42), b(Device::cpu(), 2, 42);
  DropoutForward fa = dropout_forward(a, tx, p), fb = dropout_forward(b, tx, p);
  EXPECT_EQ(to_vec(fa.y), to_vec(fb.y));  // same seed, same mask
  Vec y = to_vec(fa.y);
  size_t dropped = 0;
  Vec mask(n_);
  for (size_t i = 0; i < n_; ++i) {
    mask[i] = y[i] == 0.0 ? 0.0 : 1.0;
    dropped += y[i] == 0.0 ? 1 : 0;
    if (y[i] != 0.0) {
      EXPECT_NEAR(y[i], x[i] / (1.0 - p), 1e-6);
    }
  }
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(n_), p, 0.05);
  Tensor dx = dropout_backward(ctx_, to_tensor(r, shape_, GetParam()), fa.mask, p);
  double kept = 1.0 / (1.0 - static_cast<double>(p));
  Vec fd = fd_gradient(
      [&](const Vec& v) {
        Vec out(v.size());
        for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] * mask[i] * kept;
        return out;
      },
      x, r);
  EXPECT_LT(rel_norm_error(to_vec(dx), fd), 1e-3);
  EXPECT_EQ(to_vec(dropout_forward(ctx_, tx, 0.0f).y), to_vec(tx));
}

INSTANTIATE_TEST_SUITE_P(Formats, ElementwiseTest,
                         ::testing::Values(MemoryFormat::kContiguous, MemoryFormat::kChannelsLast));

TEST(Sum, AccumulatesInDouble) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  // 2^24 + 1 terms of 1: a float running sum stalls at 2^24; a double one does not.
  int64_t n = (int64_t{1} << 24) + 8;
  Tensor x = Tensor::empty({n});
  fill(ctx, 1.0f, x);
  EXPECT_EQ(sum(ctx, x).to_vector()[0], static_cast<float>(n));
  Vec v = random_vec(1001, 10);
  double want = 0.0;
  for (double d : v) want += d;
  Tensor s = sum(ctx, to_tensor(v, {7, 11, 13}));
  EXPECT_EQ(s.rank(), 0);
  EXPECT_NEAR(s.to_vector()[0], want, 1e-5);
}

}  // namespace
}  // namespace tandem::backend::testing
