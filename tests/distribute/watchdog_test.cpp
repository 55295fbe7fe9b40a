// Never a silent hang: a replica that stops arriving trips the watchdog (DeadlineExceeded naming
// it, the step and the collective), a replica that fails aborts the others with its cause, and
// mismatched collectives are an error naming both replicas.
#include <gtest/gtest.h>

#include <thread>

#include "engine/distribute/cpu_communicator.h"
#include "tests/distribute/distribute_test_util.h"

namespace tandem::distribute {
namespace {

using namespace std::chrono_literals;
using testing::caught;
using testing::run_ranks;

TEST(Watchdog, AStalledRankIsNamedWithTheStepAndTheCollective) {
  CpuCommunicatorGroup group(3, CommunicatorOptions{200ms});
  auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(3, [&](int r) {
    Communicator& comm = group.communicator(r);
    comm.set_step(12);
    Tensor x = Tensor::zeros({1000});
    comm.all_reduce(x, ReduceOp::kSum, {.bucket = 0});  // everyone takes part once
    if (r == 1) {
      std::this_thread::sleep_for(600ms);  // stalls past the watchdog, then arrives late
    }
    comm.all_reduce(x, ReduceOp::kSum, {.bucket = 3});
  });
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, 5s);
  for (int r : {0, 2}) {
    auto e = caught(errors[static_cast<size_t>(r)]);
    ASSERT_TRUE(e.thrown) << "rank " << r;
    EXPECT_EQ(e.code, ErrorCode::kDeadlineExceeded) << e.message;
    EXPECT_NE(e.message.find("replica 1 (its last collective"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("bucket 3"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("at step 12"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("all_reduce(sum, 1000 x f32"), std::string::npos) << e.message;
  }
  // The late rank fails at once with the first cause instead of waiting out its own timeout.
  auto late = caught(errors[1]);
  ASSERT_TRUE(late.thrown);
  EXPECT_EQ(late.code, ErrorCode::kDeadlineExceeded);
  EXPECT_NE(late.message.find("did not arrive"), std::string::npos) << late.message;
}

TEST(Watchdog, AFailingReplicaAbortsTheOthersWithItsCause) {
  CpuCommunicatorGroup group(4, CommunicatorOptions{20s});  // must not need the watchdog
  auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(4, [&](int r) {
    Communicator& comm = group.communicator(r);
    Tensor x = Tensor::zeros({64});
    try {
      if (r == 2) throw Error(ErrorCode::kDataLoss, "corrupted record at offset 4096 in shard-2.tfrecord");
      comm.all_reduce(x, ReduceOp::kAverage);  // blocked here while rank 2 fails
      comm.all_reduce(x, ReduceOp::kAverage);  // and a later entry fails fast too
    } catch (const Error& e) {
      comm.abort(e.what());
      throw;
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(caught(errors[2]).code, ErrorCode::kDataLoss);
  for (int r : {0, 1, 3}) {
    auto e = caught(errors[static_cast<size_t>(r)]);
    ASSERT_TRUE(e.thrown);
    EXPECT_EQ(e.code, ErrorCode::kAborted) << e.message;
    EXPECT_NE(e.message.find("replica 2 aborted: corrupted record at offset 4096"), std::string::npos) << e.message;
  }
  // Later collectives on an aborted group fail at once, still naming the first cause.
  Tensor x = Tensor::zeros({4});
  try {
    group.communicator(0).all_reduce(x, ReduceOp::kSum);
    FAIL() << "an aborted group must not run collectives";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAborted);
    EXPECT_NE(std::string(e.what()).find("corrupted record"), std::string::npos);
  }
}

TEST(Watchdog, GroupAbortStopsRanksBlockedInACollective) {
  CpuCommunicatorGroup group(2, CommunicatorOptions{20s});
  auto errors = run_ranks(2, [&](int r) {
    if (r == 1) {
      std::this_thread::sleep_for(50ms);
      group.abort("out of memory on replica 1");
      return;
    }
    Tensor x = Tensor::zeros({8});
    group.communicator(0).all_reduce(x, ReduceOp::kSum);
  });
  auto e = caught(errors[0]);
  EXPECT_EQ(e.code, ErrorCode::kAborted);
  EXPECT_NE(e.message.find("out of memory on replica 1"), std::string::npos) << e.message;
}

TEST(Watchdog, MismatchedSizesNameBothReplicasAndCollectives) {
  CpuCommunicatorGroup group(2, CommunicatorOptions{20s});
  auto errors = run_ranks(2, [&](int r) {
    Tensor x = Tensor::zeros({r == 0 ? 100 : 101});
    group.communicator(r).all_reduce(x, ReduceOp::kSum, {.bucket = 5});
  });
  for (int r = 0; r < 2; ++r) {
    auto e = caught(errors[static_cast<size_t>(r)]);
    EXPECT_EQ(e.code, ErrorCode::kFailedPrecondition) << e.message;
    EXPECT_NE(e.message.find("replica 0 called all_reduce(sum, 100 x f32, bucket 5) #1"), std::string::npos)
        << e.message;
    EXPECT_NE(e.message.find("replica 1 called all_reduce(sum, 101 x f32, bucket 5) #1"), std::string::npos)
        << e.message;
  }
}

TEST(Watchdog, MismatchedKindsAndOpsAreErrors) {
  CpuCommunicatorGroup group(3, CommunicatorOptions{20s});
  auto errors = run_ranks(3, [&](int r) {
    Tensor x = Tensor::zeros({16});
    if (r == 2) {
      group.communicator(r).broadcast(x, 0);
    } else {
      group.communicator(r).all_reduce(x, r == 0 ? ReduceOp::kSum : ReduceOp::kAverage);
    }
  });
  for (int r = 0; r < 3; ++r) {
    auto e = caught(errors[static_cast<size_t>(r)]);
    EXPECT_EQ(e.code, ErrorCode::kFailedPrecondition) << e.message;
    EXPECT_NE(e.message.find("mismatched collectives"), std::string::npos) << e.message;
  }
}

TEST(Watchdog, DestroyingAGroupWithWorkPendingDoesNotHang) {
  auto errors = run_ranks(1, [&](int) {
    auto group = std::make_unique<CpuCommunicatorGroup>(2, CommunicatorOptions{20s});
    Tensor x = Tensor::zeros({8});
    CollectiveHandle h = group->communicator(0).all_reduce_async(x, ReduceOp::kSum);
    EXPECT_FALSE(h.done());
    group.reset();  // rank 1 never comes: the destructor stops the group instead of waiting
  }, 10s);
  EXPECT_FALSE(errors[0]);
}

}  // namespace
}  // namespace tandem::distribute
