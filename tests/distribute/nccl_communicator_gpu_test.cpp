// The NCCL communicator on real GPUs (ctest label `gpu`): one replica thread per visible device,
// all-reduce (sum, average), broadcast and all-gather, `after` ordering behind a compute stream,
// abort, and the watchdog naming a replica that never arrives (two GPUs or more). Skips, saying
// why, where there is no driver, plugin or GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/distribute/gradient_bucketer.h"
#include "engine/distribute/nccl_communicator.h"
#include "engine/nn/init.h"
#include "engine/nn/layers.h"
#include "tests/distribute/distribute_test_util.h"
#include "tests/distribute/gpu_test_util.h"

namespace tandem::distribute {
namespace {

using namespace std::chrono_literals;
using testing::caught;
using testing::expect_no_errors;
using testing::all_devices;
using testing::run_ranks;

Tensor on(int device, std::vector<float> values) {
  const auto n = static_cast<int64_t>(values.size());
  return Tensor::from_vector(values, Shape({n})).to(Device::cuda(device));
}

TEST(NcclCommunicatorGpu, AllReduceBroadcastAndAllGatherOnEveryDevice) {
  REQUIRE_GPUS(1);
  std::vector<int> devices = all_devices();
  const int ranks = static_cast<int>(devices.size());
  NcclCommunicatorGroup group(devices, CommunicatorOptions{60s});
  const float sum = static_cast<float>(ranks * (ranks + 1) / 2);
  expect_no_errors(run_ranks(ranks, [&](int r) {
    Communicator& comm = group.communicator(r);
    EXPECT_EQ(comm.device(), Device::cuda(devices[static_cast<size_t>(r)]));
    const float v = static_cast<float>(r + 1);
    Tensor x = on(r, std::vector<float>(1001, v));
    comm.all_reduce(x, ReduceOp::kSum, {.bucket = 0});
    for (float got : x.to(Device::cpu()).to_vector()) ASSERT_EQ(got, sum);
    Tensor y = on(r, {v, 2 * v});
    comm.all_reduce(y, ReduceOp::kAverage);
    EXPECT_EQ(y.to(Device::cpu()).to_vector(), (std::vector<float>{sum / ranks, 2 * sum / ranks}));
    Tensor b = on(r, {v, -v, 0.25f});
    comm.broadcast(b, ranks - 1);
    EXPECT_EQ(b.to(Device::cpu()).to_vector(), (std::vector<float>{float(ranks), -float(ranks), 0.25f}));
    Tensor all = Tensor::zeros({ranks, 2}, DType::kF32, Device::cuda(r));
    comm.all_gather(on(r, {v, -v}), all);
    std::vector<float> gathered = all.to(Device::cpu()).to_vector();
    for (int q = 0; q < ranks; ++q) {
      EXPECT_EQ(gathered[static_cast<size_t>(2 * q)], float(q + 1));
      EXPECT_EQ(gathered[static_cast<size_t>(2 * q + 1)], -float(q + 1));
    }
  }));
}

// The data is written by an asynchronous copy on a compute stream; with tag.after the all-reduce
// must see it (a large copy, so without the ordering the collective would read stale values).
TEST(NcclCommunicatorGpu, AfterOrdersTheCollectiveBehindTheComputeStream) {
  REQUIRE_GPUS(1);
  std::vector<int> devices = all_devices();
  const int ranks = static_cast<int>(devices.size());
  NcclCommunicatorGroup group(devices, CommunicatorOptions{60s});
  const int64_t n = 32 << 20;  // 128 MiB per rank
  expect_no_errors(run_ranks(ranks, [&](int r) {
    DeviceServices& cuda = device_services(DeviceType::kCuda);
    auto compute = cuda.create_stream(r);
    Tensor x = Tensor::zeros({n}, DType::kF32, Device::cuda(r));
    cuda.synchronize(r);
    auto* pinned = static_cast<float*>(cuda.allocate_host_pinned(static_cast<size_t>(n) * sizeof(float)));
    std::fill(pinned, pinned + n, 1.0f);
    cuda.copy(x.raw_data(), x.device(), pinned, Device::cpu(), x.nbytes(), compute.get());
    group.communicator(r).all_reduce(x, ReduceOp::kSum, {.bucket = 0, .after = compute.get()});
    std::vector<float> got = x.to(Device::cpu()).to_vector();
    cuda.free_host_pinned(pinned, static_cast<size_t>(n) * sizeof(float));
    EXPECT_EQ(got.front(), static_cast<float>(ranks));
    EXPECT_EQ(got.back(), static_cast<float>(ranks));
  }));
}

TEST(NcclCommunicatorGpu, AbortStopsLaterCollectivesWithTheFirstCause) {
  REQUIRE_GPUS(1);
  NcclCommunicatorGroup group({0}, CommunicatorOptions{60s});
  Tensor x = on(0, {1, 2, 3});
  group.communicator(0).all_reduce(x, ReduceOp::kSum);
  group.communicator(0).abort("out of memory in replica 0's forward");
  try {
    group.communicator(0).all_reduce(x, ReduceOp::kSum);
    FAIL() << "an aborted group ran a collective";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAborted);
    EXPECT_NE(std::string(e.what()).find("replica 0 aborted: out of memory"), std::string::npos) << e.what();
  }
}

TEST(NcclCommunicatorGpu, TensorsMustLiveOnTheReplicasDevice) {
  REQUIRE_GPUS(1);
  NcclCommunicatorGroup group({0});
  Tensor host = Tensor::zeros({4});
  try {
    group.communicator(0).all_reduce(host, ReduceOp::kSum);
    FAIL() << "a CPU tensor was given to NCCL";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("takes tensors on cuda:0"), std::string::npos) << e.what();
  }
}

TEST(NcclCommunicatorGpu, WatchdogNamesTheReplicaThatNeverArrives) {
  REQUIRE_GPUS(2);
  NcclCommunicatorGroup group({0, 1}, CommunicatorOptions{500ms});
  auto errors = run_ranks(2, [&](int r) {
    Communicator& comm = group.communicator(r);
    comm.set_step(5);
    Tensor x = on(r, std::vector<float>(256, 1.0f));
    comm.all_reduce(x, ReduceOp::kSum, {.bucket = 0});
    if (r == 1) return;  // replica 1 stops calling collectives
    comm.all_reduce(x, ReduceOp::kSum, {.bucket = 1});
  });
  auto e = caught(errors[0]);
  ASSERT_TRUE(e.thrown);
  EXPECT_EQ(e.code, ErrorCode::kDeadlineExceeded) << e.message;
  EXPECT_NE(e.message.find("replica 1 (its last collective"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("bucket 1) #2 at step 5"), std::string::npos) << e.message;
}

// distribute.allreduce_dtype: bf16 between GPU replicas: each bucket rounded to bf16 on its device,
// summed by NCCL in bf16, widened back. With one or two devices the result is exact: the bf16 sum
// of the rounded gradients; with more, NCCL's ring order decides the roundings: within one bf16
// rounding (2^-8 relative) of every partial sum, bounded by the sum of the terms' magnitudes. With
// one GPU the all-reduce is the identity and only the rounding and widening are proved.
TEST(NcclCommunicatorGpu, BucketerAllReducesGradientsInBf16) {
  REQUIRE_GPUS(1);
  const std::vector<int> devices = all_devices();
  const int ranks = static_cast<int>(devices.size());
  NcclCommunicatorGroup group(devices, CommunicatorOptions{60s});
  std::vector<std::vector<std::vector<float>>> own(static_cast<size_t>(ranks)), reduced(own.size());
  expect_no_errors(run_ranks(ranks, [&](int r) {
    const Device device = Device::cuda(devices[static_cast<size_t>(r)]);
    nn::init::manual_seed(7);
    auto model = std::make_shared<nn::Linear>(64, 32);
    model->to(device);
    ExecutionContext ctx(device);
    GradientBucketer bucketer(group.communicator(r), ctx, model->named_parameters(),
                              BucketOptions{.first_bucket_bytes = 1000, .wire_dtype = DType::kBF16});
    Generator gen(static_cast<uint64_t>(r + 1));
    Tensor x = Tensor::empty({8, 64});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = gen.normal();
    auto y = (*model)(ctx, autograd::Variable(x.to(device)));
    autograd::sum(ctx, autograd::mul(ctx, y, y)).backward(&ctx);
    for (auto& p : model->parameters()) own[static_cast<size_t>(r)].push_back(p.grad().to_vector());
    bucketer.finish();
    for (auto& p : model->parameters()) reduced[static_cast<size_t>(r)].push_back(p.grad().to_vector());
  }));
  auto round = [](float v) { return bf16_to_float(float_to_bf16(v)); };
  for (size_t p = 0; p < own[0].size(); ++p) {
    for (size_t i = 0; i < own[0][p].size(); ++i) {
      float exact = 0.0f, want = 0.0f, magnitude = 0.0f;
      for (int r = 0; r < ranks; ++r) {
        exact += own[static_cast<size_t>(r)][p][i];
        want = round(want + round(own[static_cast<size_t>(r)][p][i]));
        magnitude += std::fabs(round(own[static_cast<size_t>(r)][p][i]));
      }
      for (int r = 0; r < ranks; ++r) {
        const float got = reduced[static_cast<size_t>(r)][p][i];
        ASSERT_EQ(got, reduced[0][p][i]) << "replicas disagree at param " << p << " element " << i;
        if (ranks <= 2) {
          ASSERT_EQ(got, want) << "param " << p << " element " << i;
        } else {
          ASSERT_NEAR(got, exact, static_cast<float>(ranks) * std::ldexp(magnitude, -8) + 1e-6f)
              << "param " << p << " element " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem::distribute
