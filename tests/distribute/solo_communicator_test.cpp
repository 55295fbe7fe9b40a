// The one-replica communicator: each collective is the identity over a group of one (all_gather a
// copy), arguments are checked as a group's are, and an abort stops later collectives.
#include <gtest/gtest.h>

#include <vector>

#include "engine/core/error.h"
#include "engine/distribute/solo_communicator.h"

namespace tandem::distribute {
namespace {

TEST(SoloCommunicator, CollectivesOverOneRankLeaveTheValues) {
  SoloCommunicator comm(Device::cpu());
  EXPECT_EQ(comm.world_size(), 1);
  EXPECT_EQ(comm.rank(), 0);
  Tensor x = Tensor::from_vector({1.5f, -2.0f, 3.25f}, {3});
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    CollectiveHandle h = comm.all_reduce_async(x, op);
    EXPECT_TRUE(h.done());
    h.wait();
    EXPECT_EQ(x.to_vector(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  }
  comm.broadcast(x, 0);
  EXPECT_EQ(x.to_vector(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  Tensor out = Tensor::zeros({1, 3});
  comm.all_gather(x, out);
  EXPECT_EQ(out.to_vector(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

TEST(SoloCommunicator, MisuseIsAnErrorAsInAGroup) {
  SoloCommunicator comm(Device::cpu());
  Tensor x = Tensor::zeros({4});
  auto code_of = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kInternal;  // nothing thrown
  };
  EXPECT_EQ(code_of([&] { comm.broadcast(x, 1); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { comm.all_reduce(Tensor::zeros({2}, DType::kI64), ReduceOp::kSum); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { comm.all_gather(x, Tensor::zeros({8})); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { comm.all_reduce(Tensor(), ReduceOp::kSum); }), ErrorCode::kInvalidArgument);
}

TEST(SoloCommunicator, AnAbortStopsLaterCollectivesWithTheFirstReason) {
  SoloCommunicator comm(Device::cpu());
  comm.abort("replica 0 read a corrupt record");
  comm.abort("a later reason");
  try {
    comm.all_reduce(Tensor::zeros({2}), ReduceOp::kSum);
    FAIL() << "a collective ran after abort";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAborted);
    EXPECT_NE(std::string(e.what()).find("replica 0 read a corrupt record"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::distribute
