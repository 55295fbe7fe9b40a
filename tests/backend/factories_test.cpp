// The tensor factories on the CPU: torch.zeros / ones / full / arange (its dtype inference, lengths,
// and errors) / rand / randn, whose draws are the counter-based stream of a seed taken from the
// context's generator (so a GPU context seeded alike draws them too: tests/cuda/factories_gpu_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/backend/factories.h"
#include "tests/backend/backend_test_util.h"

namespace tandem::backend {
namespace {

using testing::expect_error;

std::vector<int64_t> i64_values(const Tensor& t) {
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

TEST(Factories, ZerosOnesAndFullInEachDtype) {
  ExecutionContext ctx;
  EXPECT_EQ(zeros(ctx, {2, 3}).to_vector(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ones(ctx, {4}).to_vector(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(full(ctx, {2, 2}, -2.5).to_vector(), std::vector<float>(4, -2.5f));
  EXPECT_EQ(i64_values(full(ctx, {3}, 7, DType::kI64)), (std::vector<int64_t>{7, 7, 7}));
  Tensor b = full(ctx, {5}, 1.0 / 3.0, DType::kBF16);
  ASSERT_EQ(b.dtype(), DType::kBF16);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(b.data<BFloat16>()[i].bits, float_to_bf16(1.0f / 3.0f).bits);
  EXPECT_EQ(full(ctx, {0, 3}, 1.0).numel(), 0);
  expect_error([&] { full(ctx, {2}, 0.5, DType::kI64); }, ErrorCode::kInvalidArgument, {"not a whole number"});
  expect_error([&] { zeros(ctx, {2}, DType::kU8); }, ErrorCode::kInvalidArgument, {"use f32, bf16 or i64"});
}

TEST(Factories, ArangeInfersI64FromWholeNumbersAndF32Otherwise) {
  ExecutionContext ctx;
  Tensor a = arange(ctx, 5);
  EXPECT_EQ(a.dtype(), DType::kI64);
  EXPECT_EQ(i64_values(a), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(i64_values(arange(ctx, 10, 0, -3)), (std::vector<int64_t>{10, 7, 4, 1}));
  Tensor f = arange(ctx, 1, 2.5, 0.5);
  EXPECT_EQ(f.dtype(), DType::kF32);
  EXPECT_EQ(f.to_vector(), (std::vector<float>{1.0f, 1.5f, 2.0f}));
  EXPECT_EQ(arange(ctx, 3, DType::kF32).to_vector(), (std::vector<float>{0.0f, 1.0f, 2.0f}));
  EXPECT_EQ(arange(ctx, 3, 3).numel(), 0);
}

TEST(Factories, ArangeOfAFractionalStepHasTorchsLengthAndValues) {
  ExecutionContext ctx;
  // torch.arange(0, 1, 0.1): 10 values, each start + i * step in double, then rounded.
  std::vector<float> v = arange(ctx, 0, 1, 0.1).to_vector();
  ASSERT_EQ(v.size(), 10u);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], static_cast<float>(static_cast<double>(i) * 0.1)) << i;
  EXPECT_EQ(arange(ctx, 0, 1, 0.3).numel(), 4);  // 0, 0.3, 0.6, 0.9
}

TEST(Factories, ArangeRefusesWhatTorchRefuses) {
  ExecutionContext ctx;
  expect_error([&] { arange(ctx, 0, 5, 0); }, ErrorCode::kInvalidArgument, {"step must be nonzero"});
  expect_error([&] { arange(ctx, 0, 5, -1); }, ErrorCode::kInvalidArgument, {"inconsistent with step sign"});
  expect_error([&] { arange(ctx, 5, 0, 1); }, ErrorCode::kInvalidArgument, {"inconsistent with step sign"});
  expect_error([&] { arange(ctx, 0, INFINITY); }, ErrorCode::kInvalidArgument, {"must be finite"});
  expect_error([&] { arange(ctx, 0, 2, 0.5, DType::kI64); }, ErrorCode::kInvalidArgument, {"not a whole number"});
  // An end past int64's range: its last value, 2^63 (a double calls it 2^63 - 1024), would overflow the
  // kernels' start + i step.
  expect_error([&] { arange(ctx, -1024, 10760600709663905792.0, 3074457345618258944.0); },
               ErrorCode::kInvalidArgument, {"lies outside int64's range"});
  expect_error([&] { arange(ctx, 9.2e18, 9.4e18, 1e17); }, ErrorCode::kInvalidArgument,
               {"end 9.4e+18 lies outside int64's range"});
}

TEST(Factories, AnI64ArangeCountsInIntegers) {
  ExecutionContext ctx;
  // torch.arange(-1, 2**60, 2**50) has 1025 values, the last 2**60 - 1; (2^60 + 1) / 2^50 in doubles
  // rounds to exactly 1024 and drops it.
  const double big = 1152921504606846976.0, step = 1125899906842624.0;  // 2^60, 2^50
  const std::vector<int64_t> v = i64_values(arange(ctx, -1, big, step));
  ASSERT_EQ(v.size(), 1025u);
  EXPECT_EQ(v.back(), (int64_t{1} << 60) - 1);
  EXPECT_EQ(i64_values(arange(ctx, 0, 5.5, 2, DType::kI64)), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(i64_values(arange(ctx, 5, 0.5, -2, DType::kI64)), (std::vector<int64_t>{5, 3, 1}));
}

TEST(Factories, FullKeepsTheSignOfZero) {
  ExecutionContext ctx;
  for (float v : full(ctx, {4}, -0.0).to_vector()) EXPECT_TRUE(std::signbit(v));
  EXPECT_TRUE(std::signbit(bf16_to_float(full(ctx, {2}, -0.0, DType::kBF16).data<BFloat16>()[1])));
}

TEST(Factories, RandDrawsTheGeneratorsStreamOfAFreshSeed) {
  ExecutionContext ctx(Device::cpu(), 0, 1234);
  Tensor x = rand(ctx, {3, 1000});
  ExecutionContext twin(Device::cpu(), 0, 1234);
  Generator stream(twin.generator().next_u64());
  std::vector<float> v = x.to_vector();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], stream.uniform()) << i;
  EXPECT_NE(rand(ctx, {3, 1000}).to_vector(), v);  // the next call draws a new seed
}

TEST(Factories, RandAndRandnHaveTheirDistributionsMoments) {
  ExecutionContext ctx(Device::cpu(), 0, 99);
  const int64_t n = 200000;
  std::vector<float> u = rand(ctx, {n}).to_vector(), z = randn(ctx, {n}).to_vector();
  double su = 0, suu = 0, sz = 0, szz = 0;
  int64_t within_one = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = u[static_cast<size_t>(i)], b = z[static_cast<size_t>(i)];
    ASSERT_TRUE(a >= 0.0 && a < 1.0) << a;
    ASSERT_TRUE(std::isfinite(b)) << i;
    su += a;
    suu += a * a;
    sz += b;
    szz += b * b;
    within_one += std::abs(b) < 1.0 ? 1 : 0;
  }
  const double mu = su / n, mz = sz / n;
  EXPECT_NEAR(mu, 0.5, 0.005);
  EXPECT_NEAR(suu / n - mu * mu, 1.0 / 12.0, 0.002);
  EXPECT_NEAR(mz, 0.0, 0.01);
  EXPECT_NEAR(szz / n - mz * mz, 1.0, 0.02);
  EXPECT_NEAR(static_cast<double>(within_one) / n, 0.682689, 0.005);
}

}  // namespace
}  // namespace tandem::backend
