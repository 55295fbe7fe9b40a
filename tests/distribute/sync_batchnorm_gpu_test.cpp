// SyncBatchNorm on GPU replicas over NCCL (ctest label `gpu`), against the reference it must
// equal: one CPU BatchNorm over the whole batch. One replica per visible GPU (one on a single-GPU
// machine, which still runs every device kernel and both NCCL collectives), uneven slices when
// there are more; both memory formats, with and without the fused ReLU, a small shape and one
// large enough for several partial-sum chunks and channel tiles. Skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/autograd/sync_batchnorm_op.h"
#include "engine/backend/ops.h"
#include "engine/distribute/nccl_communicator.h"
#include "engine/distribute/sync_batchnorm.h"
#include "tests/distribute/distribute_test_util.h"
#include "tests/distribute/sync_batchnorm_test_util.h"
#include "tests/distribute/gpu_test_util.h"

namespace tandem::distribute {
namespace {

using namespace std::chrono_literals;
using testing::all_devices;
using testing::expect_no_errors;
using testing::run_ranks;

struct Dims {
  int64_t c, h, w;
};

using Result = testing::BatchNormResult;
const auto random_values = testing::random_normal_values;

std::vector<float> channel_values(int64_t c, float first, float step) {
  std::vector<float> v(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i) v[static_cast<size_t>(i)] = first + step * static_cast<float>(i % 7);
  return v;
}

// Samples [first, first + n) of a (N, C, H, W) batch given as NCHW values, in format, on device.
Tensor slice(const std::vector<float>& all, const Dims& d, int64_t first, int64_t n, MemoryFormat format,
             Device device) {
  const int64_t per = d.c * d.h * d.w;
  std::vector<float> part(all.begin() + first * per, all.begin() + (first + n) * per);
  return Tensor::from_vector(part, Shape({n, d.c, d.h, d.w})).to_format(format).to(device);
}

std::vector<float> host(const Tensor& t) {
  return t.to(Device::cpu()).to_format(MemoryFormat::kContiguous).to_vector();
}

// y = bn(x), loss = sum(y * w) on x's device; with reducer null the plain batch norm runs.
Result run_batchnorm(ExecutionContext& ctx, const Tensor& x, const Tensor& w, bool fuse,
                     autograd::ReplicaReducer* reducer) {
  const int64_t c = x.dim(1);
  const Device device = x.device();
  autograd::BatchNormParams params{.eps = 1e-5f, .momentum = 0.1f, .fuse_relu = fuse};
  autograd::Variable xv(x, true);
  autograd::Variable gamma(Tensor::from_vector(channel_values(c, 1.0f, -0.25f), Shape({c})).to(device), true);
  autograd::Variable beta(Tensor::from_vector(channel_values(c, -0.2f, 0.1f), Shape({c})).to(device), true);
  Tensor running_mean = Tensor::from_vector(std::vector<float>(static_cast<size_t>(c), 0.2f), Shape({c})).to(device);
  Tensor running_var = Tensor::from_vector(std::vector<float>(static_cast<size_t>(c), 1.5f), Shape({c})).to(device);
  autograd::Variable y =
      reducer ? autograd::sync_batchnorm_training(ctx, xv, gamma, beta, running_mean, running_var, params, *reducer)
              : autograd::batchnorm_training(ctx, xv, gamma, beta, running_mean, running_var, params);
  autograd::sum(ctx, autograd::mul(ctx, y, autograd::Variable(w))).backward(&ctx);
  return {host(y.value()),    host(xv.grad()),         host(running_mean),
          host(running_var), host(gamma.grad()), host(beta.grad())};
}

// skip_near_zero: values where the reference output is within 1e-5 of 0 are not compared (dx
// behind a fused ReLU, whose mask may flip there between two correct implementations).
void expect_near(const std::vector<float>& got, const std::vector<float>& want, size_t offset, const std::string& what,
                 const std::vector<float>* skip_near_zero = nullptr) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (skip_near_zero != nullptr && std::fabs((*skip_near_zero)[offset + i]) < 1e-5f) continue;
    ASSERT_NEAR(got[i], want[offset + i], 1e-4 * (1 + std::fabs(want[offset + i]))) << what << "[" << offset + i << "]";
  }
}

class SyncBatchNormGpuTest : public ::testing::TestWithParam<std::tuple<MemoryFormat, bool, int>> {};

TEST_P(SyncBatchNormGpuTest, EqualsOneCpuBatchNormOverTheWholeBatch) {
  REQUIRE_GPUS(1);
  const auto [format, fuse, shape] = GetParam();
  const Dims d = shape == 0 ? Dims{5, 3, 4} : Dims{37, 13, 13};
  const std::vector<int> devices = all_devices();
  const int ranks = static_cast<int>(devices.size());
  std::vector<int64_t> samples, first;  // rank r holds r + 2 samples: uneven with two GPUs or more
  int64_t total = 0;
  for (int r = 0; r < ranks; ++r) {
    first.push_back(total);
    samples.push_back(r + 2 + (shape == 1 ? 6 : 0));
    total += samples.back();
  }
  const int64_t per = d.c * d.h * d.w;
  std::vector<float> x = random_values(total * per, 11), w = random_values(total * per, 12);
  ExecutionContext cpu(Device::cpu(), 1);
  Result reference = run_batchnorm(cpu, slice(x, d, 0, total, format, Device::cpu()),
                                   slice(w, d, 0, total, format, Device::cpu()), fuse, nullptr);

  std::vector<Result> got(static_cast<size_t>(ranks));
  NcclCommunicatorGroup group(devices, CommunicatorOptions{60s});
  expect_no_errors(run_ranks(ranks, [&](int r) {
    const auto k = static_cast<size_t>(r);
    const Device device = Device::cuda(devices[k]);
    ExecutionContext ctx(device, 0, 1);
    ctx.bind();  // as a replica thread: the collectives follow, and the stream waits for, its stream
    CommunicatorReducer reducer(group.communicator(r));
    got[k] = run_batchnorm(ctx, slice(x, d, first[k], samples[k], format, device),
                           slice(w, d, first[k], samples[k], format, device), fuse, &reducer);
  }));

  std::vector<float> dgamma(static_cast<size_t>(d.c), 0.0f), dbeta(static_cast<size_t>(d.c), 0.0f);
  size_t offset = 0;
  for (int r = 0; r < ranks; ++r) {
    const Result& g = got[static_cast<size_t>(r)];
    expect_near(g.y, reference.y, offset, "y");
    expect_near(g.dx, reference.dx, offset, "dx", fuse ? &reference.y : nullptr);
    offset += g.y.size();
    EXPECT_EQ(g.running_mean, got[0].running_mean);  // merged from the same gathered numbers
    EXPECT_EQ(g.running_var, got[0].running_var);
    for (size_t c = 0; c < dgamma.size(); ++c) {
      dgamma[c] += g.dgamma[c];  // what the gradient buckets sum
      dbeta[c] += g.dbeta[c];
    }
  }
  expect_near(got[0].running_mean, reference.running_mean, 0, "running_mean");
  expect_near(got[0].running_var, reference.running_var, 0, "running_var");
  expect_near(dgamma, reference.dgamma, 0, "dgamma");
  expect_near(dbeta, reference.dbeta, 0, "dbeta");
}

INSTANTIATE_TEST_SUITE_P(SyncBatchNormGpu, SyncBatchNormGpuTest,
                         ::testing::Combine(::testing::Values(MemoryFormat::kContiguous, MemoryFormat::kChannelsLast),
                                            ::testing::Bool(), ::testing::Values(0, 1)));

TEST(SyncBatchNormGpu, MomentsRepeatBitwise) {
  REQUIRE_GPUS(1);
  ExecutionContext ctx(Device::cuda(0), 0, 1);
  ctx.bind();
  const Dims d{70, 17, 19};
  std::vector<float> x = random_values(9 * d.c * d.h * d.w, 5);
  for (MemoryFormat format : {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}) {
    Tensor t = slice(x, d, 0, 9, format, Device::cuda(0));
    std::vector<float> first = host(backend::batchnorm_moments(ctx, t));
    EXPECT_EQ(host(backend::batchnorm_moments(ctx, t)), first) << memory_format_name(format);
    ExecutionContext cpu(Device::cpu(), 1);
    expect_near(first, host(backend::batchnorm_moments(cpu, t.to(Device::cpu()))), 0, "moments");
  }
}

}  // namespace
}  // namespace tandem::distribute
