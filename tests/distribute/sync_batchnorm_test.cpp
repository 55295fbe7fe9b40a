// SyncBatchNorm against the reference it must equal: one BatchNorm (the backend's kernel) over
// the whole batch. Replicas hold uneven slices of it; forward, running statistics and every
// gradient must match, in both memory formats, with and without the fused ReLU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/autograd/sync_batchnorm_op.h"
#include "engine/distribute/cpu_communicator.h"
#include "engine/distribute/sync_batchnorm.h"
#include "engine/nn/layers.h"
#include "models/registry.h"
#include "tests/distribute/distribute_test_util.h"
#include "tests/distribute/sync_batchnorm_test_util.h"

namespace tandem::distribute {
namespace {

using namespace std::chrono_literals;
using testing::expect_no_errors;
using testing::run_ranks;

constexpr int64_t kC = 5, kH = 3, kW = 4;
const std::vector<int64_t> kSamples = {1, 2, 3};  // per replica: uneven on purpose

using Result = testing::BatchNormResult;
const auto random_values = testing::random_normal_values;

// Samples [first, first + n) of a (N, C, H, W) tensor given as NCHW values, in format.
Tensor slice(const std::vector<float>& all, int64_t first, int64_t n, MemoryFormat format) {
  const int64_t per = kC * kH * kW;
  std::vector<float> part(all.begin() + first * per, all.begin() + (first + n) * per);
  return Tensor::from_vector(part, Shape({n, kC, kH, kW})).to_format(format);
}

// y = bn(x), loss = sum(y * w); with reducer null the plain batch norm runs.
Result run_batchnorm(const Tensor& x, const Tensor& w, bool fuse, autograd::ReplicaReducer* reducer) {
  ExecutionContext ctx(Device::cpu(), 1);
  autograd::BatchNormParams params{.eps = 1e-5f, .momentum = 0.1f, .fuse_relu = fuse};
  autograd::Variable xv(x, true), gamma(Tensor::from_vector({1.0f, 0.5f, 2.0f, -1.0f, 0.25f}, Shape({kC})), true);
  autograd::Variable beta(Tensor::from_vector({0.0f, 0.1f, -0.2f, 0.3f, 1.0f}, Shape({kC})), true);
  Tensor running_mean = Tensor::from_vector(std::vector<float>(kC, 0.2f), Shape({kC}));
  Tensor running_var = Tensor::from_vector(std::vector<float>(kC, 1.5f), Shape({kC}));
  autograd::Variable y =
      reducer ? autograd::sync_batchnorm_training(ctx, xv, gamma, beta, running_mean, running_var, params, *reducer)
              : autograd::batchnorm_training(ctx, xv, gamma, beta, running_mean, running_var, params);
  autograd::sum(ctx, autograd::mul(ctx, y, autograd::Variable(w))).backward(&ctx);
  return {y.value().to_vector(),     xv.grad().to_vector(),    running_mean.to_vector(),
          running_var.to_vector(),   gamma.grad().to_vector(), beta.grad().to_vector()};
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, size_t offset, const char* what) {
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[offset + i], 2e-5 * (1 + std::fabs(want[offset + i]))) << what << "[" << offset + i << "]";
  }
}

class SyncBatchNormTest : public ::testing::TestWithParam<std::tuple<MemoryFormat, bool>> {};

TEST_P(SyncBatchNormTest, EqualsOneBatchNormOverTheWholeBatch) {
  const auto [format, fuse] = GetParam();
  const int ranks = static_cast<int>(kSamples.size());
  const int64_t total = 6, per = kC * kH * kW;
  std::vector<float> x = random_values(total * per, 11), w = random_values(total * per, 12);
  Result reference = run_batchnorm(slice(x, 0, total, format), slice(w, 0, total, format), fuse, nullptr);

  std::vector<Result> got(static_cast<size_t>(ranks));
  CpuCommunicatorGroup group(ranks, CommunicatorOptions{20s});
  expect_no_errors(run_ranks(ranks, [&](int r) {
    int64_t first = 0;
    for (int q = 0; q < r; ++q) first += kSamples[static_cast<size_t>(q)];
    const int64_t n = kSamples[static_cast<size_t>(r)];
    CommunicatorReducer reducer(group.communicator(r));
    got[static_cast<size_t>(r)] = run_batchnorm(slice(x, first, n, format), slice(w, first, n, format), fuse, &reducer);
  }));

  std::vector<float> dgamma(kC, 0.0f), dbeta(kC, 0.0f);
  size_t offset = 0;
  for (int r = 0; r < ranks; ++r) {
    const Result& g = got[static_cast<size_t>(r)];
    expect_near(g.y, reference.y, offset, "y");
    expect_near(g.dx, reference.dx, offset, "dx");
    offset += g.y.size();
    // Running statistics are computed from the same gathered numbers: bitwise equal everywhere.
    EXPECT_EQ(g.running_mean, got[0].running_mean);
    EXPECT_EQ(g.running_var, got[0].running_var);
    for (int64_t c = 0; c < kC; ++c) {
      dgamma[static_cast<size_t>(c)] += g.dgamma[static_cast<size_t>(c)];  // what the buckets sum
      dbeta[static_cast<size_t>(c)] += g.dbeta[static_cast<size_t>(c)];
    }
  }
  expect_near(got[0].running_mean, reference.running_mean, 0, "running_mean");
  expect_near(got[0].running_var, reference.running_var, 0, "running_var");
  expect_near(dgamma, reference.dgamma, 0, "dgamma");
  expect_near(dbeta, reference.dbeta, 0, "dbeta");
}

INSTANTIATE_TEST_SUITE_P(SyncBatchNorm, SyncBatchNormTest,
                         ::testing::Combine(::testing::Values(MemoryFormat::kContiguous, MemoryFormat::kChannelsLast),
                                            ::testing::Bool()));

TEST(SyncBatchNorm, PerReplicaStatisticsDifferFromTheGlobalOnes) {
  // The test above could pass by accident if each slice's statistics were close to the whole
  // batch's: here the slices have different means, so per-replica normalisation is far off.
  std::vector<float> x = random_values(2 * kC * kH * kW, 21);
  for (size_t i = x.size() / 2; i < x.size(); ++i) x[i] += 3.0f;
  std::vector<float> w(x.size(), 1.0f);
  Result whole = run_batchnorm(slice(x, 0, 2, MemoryFormat::kContiguous), slice(w, 0, 2, MemoryFormat::kContiguous),
                               false, nullptr);
  Result first = run_batchnorm(slice(x, 0, 1, MemoryFormat::kContiguous), slice(w, 0, 1, MemoryFormat::kContiguous),
                               false, nullptr);
  EXPECT_GT(std::fabs(first.y[0] - whole.y[0]), 0.5f);
}

TEST(SyncBatchNorm, ConvertReachesEveryBatchNormOfAModel) {
  CpuCommunicatorGroup group(2, CommunicatorOptions{20s});
  auto model = models::create_model({.name = "resnet20", .num_classes = 10, .in_channels = 3, .input_size = 32});
  int expected = 0;
  for (auto& [name, buffer] : model->named_buffers()) expected += name.ends_with("running_mean") ? 1 : 0;
  EXPECT_EQ(convert_sync_batchnorm(*model, group.communicator(0)), expected);
  EXPECT_GE(expected, 19);  // ResNet-20: the stem, two per block in nine blocks, and any shortcuts
}

TEST(SyncBatchNorm, ASingleValuePerChannelIsRefused) {
  CpuCommunicatorGroup group(1, CommunicatorOptions{20s});
  CommunicatorReducer reducer(group.communicator(0));
  ExecutionContext ctx(Device::cpu(), 1);
  autograd::Variable x(Tensor::zeros({1, 2, 1, 1}), true);
  autograd::Variable gamma(Tensor::zeros({2}), true), beta(Tensor::zeros({2}), true);
  Tensor rm = Tensor::zeros({2}), rv = Tensor::zeros({2});
  try {
    autograd::sync_batchnorm_training(ctx, x, gamma, beta, rm, rv, {}, reducer);
    FAIL() << "one value per channel has no variance";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("more than 1"), std::string::npos) << e.what();
  }
  // No unbiased variance exists: the running statistics are left as they were, not made infinite.
  EXPECT_EQ(rm.to_vector(), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(rv.to_vector(), (std::vector<float>{0.0f, 0.0f}));
}

TEST(SyncBatchNorm, OneValueHereIsEnoughWhenOtherReplicasHoldMore) {
  // The count check reads the merged count only when this replica alone cannot settle it.
  CpuCommunicatorGroup group(2, CommunicatorOptions{20s});
  expect_no_errors(run_ranks(2, [&](int r) {
    CommunicatorReducer reducer(group.communicator(r));
    ExecutionContext ctx(Device::cpu(), 1);
    autograd::Variable x(Tensor::from_vector(r == 0 ? std::vector<float>{1.0f} : std::vector<float>{2.0f, 4.0f},
                                             Shape({r == 0 ? 1 : 2, 1, 1, 1})),
                         true);
    autograd::Variable gamma(Tensor::from_vector({1.0f}, Shape({1})), true);
    autograd::Variable beta(Tensor::zeros({1}), true);
    Tensor rm = Tensor::zeros({1}), rv = Tensor::zeros({1});
    autograd::BatchNormParams params{.eps = 0.0f, .momentum = 1.0f, .fuse_relu = false};
    autograd::sync_batchnorm_training(ctx, x, gamma, beta, rm, rv, params, reducer);
    EXPECT_FLOAT_EQ(rm.to_vector()[0], 7.0f / 3.0f);  // mean of {1, 2, 4}
    EXPECT_FLOAT_EQ(rv.to_vector()[0], 7.0f / 3.0f);  // unbiased variance of {1, 2, 4}: (16/9 + 1/9 + 25/9) / 2
  }));
}

}  // namespace
}  // namespace tandem::distribute
