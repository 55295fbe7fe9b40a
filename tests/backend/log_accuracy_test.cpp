// The f32 log of the CPU backend is within an ulp of the true value over the whole normal range and
// right next to 1, where log(x) is tiny and an absolute error of 1e-6 (oneDNN's eltwise_log, 1,832
// ulp off) would be most of the result. Its derivative, dy / x, is unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backend_test_util.h"

namespace tandem::backend::testing {
namespace {

// Floats as integers that count representable values: the distance of two is their ulp distance.
int64_t ordered(float f) {
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
}

int64_t ulps(float a, float b) {
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// Log-spaced over [1e-30, 1e30], then every float within 5,000 steps of 1 on either side.
std::vector<float> log_inputs() {
  std::vector<float> x;
  constexpr int kSpread = 100000;
  for (int i = 0; i < kSpread; ++i) {
    const double e = -30.0 + 60.0 * static_cast<double>(i) / (kSpread - 1);
    x.push_back(static_cast<float>(std::pow(10.0, e)));
  }
  float up = 1.0f, down = 1.0f;
  for (int k = 0; k < 5000; ++k) {
    x.push_back(up);
    x.push_back(down);
    up = std::nextafter(up, 2.0f);
    down = std::nextafter(down, 0.0f);
  }
  return x;
}

TEST(CpuLog, IsWithinAnUlpOfTheCorrectlyRoundedLog) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  const std::vector<float> x = log_inputs();
  const auto n = static_cast<int64_t>(x.size());
  Tensor y = unary(ctx, UnaryOp::kLog, Tensor::from_vector(x, {n}));
  ASSERT_EQ(y.dtype(), DType::kF32);
  const float* got = y.data<float>();
  int64_t worst = 0, off = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(std::log(static_cast<double>(x[i])));
    const int64_t d = ulps(got[i], want);
    if (d > 1) ++off;
    if (d > worst) {
      worst = d;
      worst_at = i;
    }
  }
  EXPECT_EQ(off, 0) << "worst: log(" << x[worst_at] << ") = " << got[worst_at] << ", " << worst << " ulp from "
                    << static_cast<float>(std::log(static_cast<double>(x[worst_at])));
}

TEST(CpuLog, OneZeroInfinityAndNegativesGiveTheIeeeResults) {
  ExecutionContext ctx(Device::cpu(), 1);
  const float inf = std::numeric_limits<float>::infinity();
  Tensor y = unary(ctx, UnaryOp::kLog, Tensor::from_vector({1.0f, 0.0f, inf, -1.0f}, {4}));
  const std::vector<float> v = y.to_vector();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], -inf);
  EXPECT_EQ(v[2], inf);
  EXPECT_TRUE(std::isnan(v[3]));
}

TEST(CpuLog, TheDerivativeIsDyOverX) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  Vec x = random_vec(4099, 11, 1e-3, 50.0), dy = random_vec(4099, 12);
  x[0] = 1.0;
  x[1] = 1e-20;
  const Shape s{static_cast<int64_t>(x.size())};
  Tensor tx = to_tensor(x, s);
  Tensor y = unary(ctx, UnaryOp::kLog, tx);
  Vec dx = to_vec(unary_backward(ctx, UnaryOp::kLog, tx, y, to_tensor(dy, s)));
  ASSERT_EQ(dx.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = dy[i] / x[i];
    EXPECT_NEAR(dx[i], want, 1e-5 * std::fabs(want)) << "x " << x[i];
  }
}

}  // namespace
}  // namespace tandem::backend::testing
