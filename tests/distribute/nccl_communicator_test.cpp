// The NCCL communicator without a GPU: creating the group here fails with Unavailable saying why,
// and its adapter logic (event ring, `after` ordering, watchdog, abort, mismatch, NCCL's
// asynchronous errors) runs over simulated device collectives on real replica threads.
#include <gtest/gtest.h>

#include <thread>

#include "engine/autograd/ops.h"
#include "engine/backend/plugin_loader.h"
#include "engine/distribute/gradient_bucketer.h"
#include "engine/distribute/nccl_communicator.h"
#include "engine/nn/init.h"
#include "engine/nn/layers.h"
#include "tests/distribute/distribute_test_util.h"
#include "tests/distribute/nccl_communicator_sim_util.h"

namespace tandem::distribute {
namespace {

using namespace std::chrono_literals;
using testing::caught;
using testing::expect_no_errors;
using testing::run_ranks;
using testing::SimCollectives;
using testing::SimServices;
using testing::SimStream;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// An NCCL communicator group over simulated collectives; `sim` stays valid while `group` lives.
struct SimGroup {
  explicit SimGroup(int ranks, std::chrono::milliseconds timeout = 20s) {
    auto collectives = std::make_unique<SimCollectives>(ranks);
    sim = collectives.get();
    group = std::make_unique<NcclCommunicatorGroup>(std::move(collectives), services, CommunicatorOptions{timeout});
  }
  Communicator& comm(int rank) { return group->communicator(rank); }

  SimServices services;
  SimCollectives* sim = nullptr;
  std::unique_ptr<NcclCommunicatorGroup> group;
};

TEST(NcclCommunicatorGroup, WithoutAGpuCreationIsUnavailableAndSaysWhy) {
  const auto& status = backend::load_cuda_plugin();
  if (status.loaded && status.device_count > 0) {
    GTEST_SKIP() << "a GPU is usable here; test_distribute_gpu covers creating the group";
  }
  try {
    NcclCommunicatorGroup group({0});
    FAIL() << "an NCCL group was created without a usable GPU";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << message;
    EXPECT_TRUE(contains(message, "NCCL communicators over cuda:0")) << message;
    EXPECT_TRUE(contains(message, status.error)) << message;  // the loader's own reason, verbatim
    EXPECT_TRUE(contains(message, "trainer doctor")) << message;
  }
}

TEST(NcclCommunicatorGroup, ABadDeviceListIsInvalidBeforeAnyPluginIsNeeded) {
  for (const std::vector<int>& devices : {std::vector<int>{}, std::vector<int>{0, 1, 0}, std::vector<int>{-1}}) {
    try {
      NcclCommunicatorGroup group(devices);
      FAIL() << "accepted " << devices.size() << " device(s)";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  }
}

TEST(NcclCommunicatorSim, AllReduceSumAndAverageBroadcastAndAllGather) {
  SimGroup g(3);
  expect_no_errors(run_ranks(3, [&](int r) {
    Communicator& comm = g.comm(r);
    EXPECT_EQ(comm.rank(), r);
    EXPECT_EQ(comm.world_size(), 3);
    EXPECT_EQ(comm.device(), Device::cpu());
    const float v = static_cast<float>(r + 1);
    Tensor x = Tensor::from_vector({v, 10 * v, 0.5f}, Shape({3}));
    comm.all_reduce(x, ReduceOp::kSum);
    EXPECT_EQ(x.to_vector(), (std::vector<float>{6, 60, 1.5f}));
    Tensor y = Tensor::from_vector({static_cast<float>(r), 3 * v}, Shape({2}));
    comm.all_reduce(y, ReduceOp::kAverage);
    EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 6}));
    Tensor b = Tensor::from_vector({v, -v}, Shape({2}));
    comm.broadcast(b, 2);
    EXPECT_EQ(b.to_vector(), (std::vector<float>{3, -3}));
    Tensor all = Tensor::zeros({3, 2});
    comm.all_gather(Tensor::from_vector({v, -v}, Shape({2})), all);
    EXPECT_EQ(all.to_vector(), (std::vector<float>{1, -1, 2, -2, 3, -3}));
  }));
  EXPECT_FALSE(g.sim->aborted());
}

TEST(NcclCommunicatorSim, ManyAsynchronousLaunchesWrapTheEventRing) {
  constexpr int kLaunches = 200;  // three times the ring: launches wait for the oldest, in order
  SimGroup g(3);
  expect_no_errors(run_ranks(3, [&](int r) {
    std::vector<Tensor> xs;
    std::vector<CollectiveHandle> handles;
    for (int i = 0; i < kLaunches; ++i) {
      xs.push_back(Tensor::from_vector({static_cast<float>(i * r)}, Shape({1})));
      handles.push_back(g.comm(r).all_reduce_async(xs.back(), ReduceOp::kSum, {.bucket = i}));
    }
    handles.back().wait();
    for (int i = 0; i < kLaunches; ++i) {
      EXPECT_TRUE(handles[static_cast<size_t>(i)].done());
      handles[static_cast<size_t>(i)].wait();
      EXPECT_EQ(xs[static_cast<size_t>(i)].to_vector()[0], static_cast<float>(3 * i)) << "launch " << i;
    }
  }));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(g.sim->launches(r), kLaunches);
}

// tag.after: the collective follows the work queued on the caller's stream (the gradients it
// reduces) on the device; without it, it would run at once.
TEST(NcclCommunicatorSim, AfterOrdersTheCollectiveBehindTheCallersStream) {
  SimGroup g(2);
  expect_no_errors(run_ranks(2, [&](int r) {
    SimStream compute;
    compute.queue();  // this replica's backward, still running
    Tensor x = Tensor::from_vector({static_cast<float>(r + 1)}, Shape({1}));
    CollectiveHandle h = g.comm(r).all_reduce_async(x, ReduceOp::kSum, {.bucket = 0, .after = &compute});
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(h.done()) << "the collective ran before the work it must follow";
    EXPECT_EQ(x.to_vector()[0], static_cast<float>(r + 1));
    compute.finish_all();
    h.wait();
    EXPECT_EQ(x.to_vector()[0], 3.0f);
    compute.queue();  // more compute, which a collective without `after` does not wait for
    Tensor y = Tensor::from_vector({1.0f}, Shape({1}));
    g.comm(r).all_reduce(y, ReduceOp::kSum);
    EXPECT_EQ(y.to_vector()[0], 2.0f);
  }));
}

TEST(NcclCommunicatorSim, WatchdogNamesTheReplicaTheStepAndTheCollective) {
  SimGroup g(3, 200ms);
  auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(3, [&](int r) {
    Communicator& comm = g.comm(r);
    comm.set_step(12);
    Tensor x = Tensor::zeros({1000});
    comm.all_reduce(x, ReduceOp::kSum, {.bucket = 0});  // everyone takes part once
    if (r == 1) return;                                   // then replica 1 stops calling collectives
    comm.all_reduce(x, ReduceOp::kSum, {.bucket = 3});
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  for (int r : {0, 2}) {
    auto e = caught(errors[static_cast<size_t>(r)]);
    ASSERT_TRUE(e.thrown) << "rank " << r;
    EXPECT_EQ(e.code, ErrorCode::kDeadlineExceeded) << e.message;
    EXPECT_TRUE(contains(e.message, "watchdog: replica 1 (its last collective: all_reduce(sum, 1000 x f32, bucket 0) "
                                    "#1 at step 12) did not arrive at all_reduce(sum, 1000 x f32, bucket 3) #2 at "
                                    "step 12 within 0.200 s"))
        << e.message;
  }
  EXPECT_FALSE(caught(errors[1]).thrown);
  EXPECT_TRUE(g.sim->aborted());  // NCCL was aborted, so no kernel keeps waiting for replica 1
  // Replica 1 arriving late fails at once with the first cause.
  Tensor x = Tensor::zeros({1000});
  try {
    g.comm(1).all_reduce(x, ReduceOp::kSum, {.bucket = 3});
    FAIL() << "a stopped group ran a collective";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
    EXPECT_TRUE(contains(e.what(), "replica 1 stopped: watchdog: replica 1")) << e.what();
  }
}

TEST(NcclCommunicatorSim, TheWatchdogThreadStopsAGroupNobodyWaitsOnTheHost) {
  // A GPU replica waits for its buckets on the device (wait_on), so no host wait runs the watchdog:
  // the group's own thread must notice that replica 1 never came, and abort NCCL.
  SimGroup g(2, 100ms);
  Tensor x = Tensor::zeros({16});
  SimStream compute;
  g.comm(0).set_step(3);
  g.comm(0).all_reduce_async(x, ReduceOp::kSum, {.bucket = 0}).wait_on(compute);
  auto start = std::chrono::steady_clock::now();
  while (!g.sim->aborted() && std::chrono::steady_clock::now() - start < 5s) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(g.sim->aborted());
  try {
    g.comm(0).all_reduce(x, ReduceOp::kSum, {.bucket = 1});
    FAIL() << "a stopped group ran a collective";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
    EXPECT_TRUE(contains(e.what(), "replica 1")) << e.what();
  }
}

TEST(NcclCommunicatorSim, WatchdogOnAStuckDeviceSaysEveryReplicaLaunched) {
  SimGroup g(1, 200ms);
  g.sim->hold(true);
  Tensor x = Tensor::zeros({8});
  g.comm(0).set_step(4);
  try {
    g.comm(0).all_reduce(x, ReduceOp::kAverage, {.bucket = 1});
    FAIL() << "a stuck collective returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
    EXPECT_TRUE(contains(e.what(), "all_reduce(average, 8 x f32, bucket 1) #1 at step 4 did not complete within "
                                   "0.200 s on replica 0 though every replica launched it"))
        << e.what();
  }
}

TEST(NcclCommunicatorSim, DoneTurnsTrueWhenTheWatchdogFires) {
  SimGroup g(2, 100ms);
  Tensor x = Tensor::zeros({4});
  CollectiveHandle h = g.comm(0).all_reduce_async(x, ReduceOp::kSum);  // replica 1 never comes
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!h.done() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(h.done()) << "a poller would spin forever";
  EXPECT_THROW(h.wait(), Error);
}

TEST(NcclCommunicatorSim, AFailingReplicaAbortsTheOthersWithItsCause) {
  SimGroup g(3);  // 20 s: the abort, not the watchdog, must stop them
  auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(3, [&](int r) {
    Communicator& comm = g.comm(r);
    Tensor x = Tensor::zeros({64});
    try {
      if (r == 2) {
        std::this_thread::sleep_for(50ms);  // the others are blocked in the all-reduce by now
        throw Error(ErrorCode::kDataLoss, "corrupted record at offset 4096 in shard-2.tfrecord");
      }
      comm.all_reduce(x, ReduceOp::kAverage);
    } catch (const Error& e) {
      comm.abort(e.what());
      throw;
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(caught(errors[2]).code, ErrorCode::kDataLoss);
  for (int r : {0, 1}) {
    auto e = caught(errors[static_cast<size_t>(r)]);
    ASSERT_TRUE(e.thrown);
    EXPECT_EQ(e.code, ErrorCode::kAborted) << e.message;
    EXPECT_TRUE(contains(e.message, "replica 2 aborted: corrupted record at offset 4096")) << e.message;
  }
  EXPECT_TRUE(g.sim->aborted());
  g.group->abort("later cause");  // the first cause wins
  Tensor x = Tensor::zeros({4});
  try {
    g.comm(0).all_reduce(x, ReduceOp::kSum);
    FAIL() << "an aborted group ran a collective";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAborted);
    EXPECT_TRUE(contains(e.what(), "corrupted record")) << e.what();
  }
}

TEST(NcclCommunicatorSim, MismatchedCollectivesStopBeforeTheDeviceRunsThem) {
  SimGroup g(2);
  auto errors = run_ranks(2, [&](int r) {
    Tensor x = Tensor::zeros({r == 0 ? 10 : 12});
    g.comm(r).all_reduce(x, ReduceOp::kSum);
  });
  for (int r : {0, 1}) {
    auto e = caught(errors[static_cast<size_t>(r)]);
    ASSERT_TRUE(e.thrown);
    EXPECT_EQ(e.code, ErrorCode::kFailedPrecondition) << e.message;
    EXPECT_TRUE(contains(e.message, "mismatched collectives")) << e.message;
    EXPECT_TRUE(contains(e.message, "10 x f32") && contains(e.message, "12 x f32")) << e.message;
  }
  // The second to launch was refused before reaching the device (the first may have been too,
  // if the abort beat its launch).
  EXPECT_LE(g.sim->launches(0) + g.sim->launches(1), 1);
}

TEST(NcclCommunicatorSim, AnAsynchronousNcclErrorStopsTheGroup) {
  SimGroup g(2);
  g.sim->set_async_error(0, "NCCL error 6 on rank 0 (cuda:0): remote process exited or there was a network error");
  Tensor x = Tensor::zeros({4});
  g.comm(0).set_step(7);
  try {
    g.comm(0).all_reduce(x, ReduceOp::kSum, {.bucket = 2});  // replica 1 never comes; the error says why
    FAIL() << "the collective returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_TRUE(contains(e.what(), "NCCL failed on replica 0 in all_reduce(sum, 4 x f32, bucket 2) #1 at step 7: "
                                   "NCCL error 6"))
        << e.what();
  }
  EXPECT_TRUE(g.sim->aborted());
}

TEST(NcclCommunicatorSim, MisuseIsAnErrorNamingTheReplica) {
  SimGroup g(2);
  Communicator& comm = g.comm(1);
  auto code_of = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kInternal;
  };
  EXPECT_EQ(code_of([&] { comm.all_reduce(Tensor(), ReduceOp::kSum); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { comm.all_reduce(Tensor::zeros({2}, DType::kI64), ReduceOp::kSum); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { comm.broadcast(Tensor::zeros({2}), 2); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { comm.all_gather(Tensor::zeros({2}), Tensor::zeros({3})); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { g.group->communicator(2); }), ErrorCode::kOutOfRange);
  EXPECT_FALSE(g.sim->aborted());  // misuse is refused before anything is launched
  EXPECT_EQ(g.sim->launches(1), 0);
}

TEST(NcclCommunicatorSim, DestroyingTheGroupWithWorkPendingDoesNotHang) {
  auto start = std::chrono::steady_clock::now();
  {
    SimGroup g(2, 300ms);
    Tensor x = Tensor::zeros({4});
    g.comm(0).all_reduce_async(x, ReduceOp::kSum);  // replica 1 never comes
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

// distribute.allreduce_dtype: bf16 over NCCL: the communicator hands bf16 buffers to the device
// collectives as bf16 (NCCL's ring rounds each partial sum), and the bucketer rounds each bucket on
// the replica's device before its all-reduce and widens it after.
float bf16_round(float x) { return bf16_to_float(float_to_bf16(x)); }

TEST(NcclCommunicatorSim, AllReducesBf16AsBf16) {
  SimGroup g(3);
  const std::vector<float> values = {1.0f, 1.0f / 3.0f, 1000.5f};
  expect_no_errors(run_ranks(3, [&](int r) {
    std::vector<BFloat16> bits;
    for (float v : values) bits.push_back(float_to_bf16(v * static_cast<float>(r + 1)));
    Tensor x = Tensor::empty({3}, DType::kBF16);
    std::memcpy(x.raw_data(), bits.data(), bits.size() * sizeof(BFloat16));
    g.comm(r).all_reduce(x, ReduceOp::kSum);
    const auto* got = static_cast<const BFloat16*>(x.raw_data());
    for (size_t i = 0; i < values.size(); ++i) {
      float want = bf16_round(values[i]);
      for (int q = 1; q < 3; ++q) want = bf16_round(want + bf16_round(values[i] * static_cast<float>(q + 1)));
      EXPECT_EQ(got[i].bits, float_to_bf16(want).bits) << "element " << i;
    }
  }));
  Tensor ints = Tensor::zeros({2}, DType::kI32);
  EXPECT_THROW(g.comm(0).all_reduce(ints, ReduceOp::kSum), Error);
}

TEST(NcclCommunicatorSim, BucketerSendsBf16GradientsAndWidensTheSums) {
  constexpr int kRanks = 2;
  SimGroup g(kRanks);
  std::vector<std::vector<std::vector<float>>> own(kRanks), reduced(kRanks);
  expect_no_errors(run_ranks(kRanks, [&](int r) {
    nn::init::manual_seed(7);
    auto model = std::make_shared<nn::Linear>(16, 8);
    ExecutionContext ctx(Device::cpu(), 1);
    GradientBucketer bucketer(g.comm(r), ctx, model->named_parameters(),
                              BucketOptions{.first_bucket_bytes = 100, .wire_dtype = DType::kBF16});
    Generator gen(static_cast<uint64_t>(r + 1));
    Tensor x = Tensor::empty({4, 16});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = gen.normal();
    auto y = (*model)(ctx, autograd::Variable(x));
    autograd::sum(ctx, autograd::mul(ctx, y, y)).backward(&ctx);
    for (auto& p : model->parameters()) own[static_cast<size_t>(r)].push_back(p.grad().to_vector());
    bucketer.finish();
    for (auto& p : model->parameters()) reduced[static_cast<size_t>(r)].push_back(p.grad().to_vector());
  }));
  for (size_t p = 0; p < own[0].size(); ++p) {
    for (size_t i = 0; i < own[0][p].size(); ++i) {
      const float want = bf16_round(bf16_round(own[0][p][i]) + bf16_round(own[1][p][i]));
      ASSERT_EQ(reduced[0][p][i], want) << "param " << p << " element " << i;
      ASSERT_EQ(reduced[1][p][i], want) << "param " << p << " element " << i;
    }
  }
}

}  // namespace
}  // namespace tandem::distribute
