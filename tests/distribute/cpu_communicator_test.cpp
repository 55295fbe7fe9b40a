// The CPU communicator on real replica threads: all-reduce, broadcast and all-gather against
// left-to-right references for 1, 2, 3, 4 and 8 ranks on odd sizes, bitwise equal on every rank
// and across runs, asynchronous launches, and errors for misuse.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/core/random.h"
#include "engine/distribute/cpu_communicator.h"
#include "tests/distribute/distribute_test_util.h"

namespace tandem::distribute {
namespace {

using testing::expect_no_errors;
using testing::run_ranks;

const CommunicatorOptions kFast{std::chrono::seconds(20)};

std::vector<float> rank_values(int rank, int64_t n) {
  Generator g(1000 + static_cast<uint64_t>(rank));
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = g.normal() * 100.0f;
  return v;
}

// ((x0 + x1) + x2) + ... in float, then / R for the average: the order the communicator promises.
std::vector<float> left_to_right(int ranks, int64_t n, ReduceOp op) {
  std::vector<float> acc = rank_values(0, n);
  for (int r = 1; r < ranks; ++r) {
    std::vector<float> v = rank_values(r, n);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += v[i];
  }
  if (op == ReduceOp::kAverage) {
    for (auto& x : acc) x /= static_cast<float>(ranks);
  }
  return acc;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::vector<float>> all_reduce_on_threads(int ranks, int64_t n, ReduceOp op) {
  CpuCommunicatorGroup group(ranks, kFast);
  std::vector<std::vector<float>> results(static_cast<size_t>(ranks));
  expect_no_errors(run_ranks(ranks, [&](int r) {
    Tensor x = Tensor::from_vector(rank_values(r, n), Shape({n}));
    group.communicator(r).all_reduce(x, op);
    results[static_cast<size_t>(r)] = x.to_vector();
  }));
  return results;
}

class CpuCommunicatorRanks : public ::testing::TestWithParam<int> {};

TEST_P(CpuCommunicatorRanks, AllReduceSumAndAverageEqualTheLeftToRightReferenceBitwise) {
  const int ranks = GetParam();
  for (int64_t n : {1, 7, 1001, 65537}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      std::vector<float> expected = left_to_right(ranks, n, op);
      auto results = all_reduce_on_threads(ranks, n, op);
      for (int r = 0; r < ranks; ++r) {
        EXPECT_TRUE(bitwise_equal(results[static_cast<size_t>(r)], expected))
            << "rank " << r << " of " << ranks << ", n " << n << ", " << reduce_op_name(op);
      }
    }
  }
}

TEST_P(CpuCommunicatorRanks, AllReduceIsBitwiseRepeatableAcrossRuns) {
  const int ranks = GetParam();
  auto first = all_reduce_on_threads(ranks, 4099, ReduceOp::kAverage);
  auto second = all_reduce_on_threads(ranks, 4099, ReduceOp::kAverage);
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(bitwise_equal(first[static_cast<size_t>(r)], second[static_cast<size_t>(r)]));
    EXPECT_TRUE(bitwise_equal(first[static_cast<size_t>(r)], first[0]));
  }
}

TEST_P(CpuCommunicatorRanks, BroadcastCopiesTheRootToEveryRank) {
  const int ranks = GetParam();
  const int root = ranks - 1;
  const int64_t n = 999;
  CpuCommunicatorGroup group(ranks, kFast);
  std::vector<std::vector<float>> results(static_cast<size_t>(ranks));
  std::vector<std::vector<int64_t>> ints(static_cast<size_t>(ranks));
  expect_no_errors(run_ranks(ranks, [&](int r) {
    Tensor x = Tensor::from_vector(rank_values(r, n), Shape({n}));
    Tensor counter = Tensor::empty({3}, DType::kI64);
    for (int i = 0; i < 3; ++i) counter.data<int64_t>()[i] = r * 10 + i;
    group.communicator(r).broadcast(x, root);
    group.communicator(r).broadcast(counter, root);
    results[static_cast<size_t>(r)] = x.to_vector();
    ints[static_cast<size_t>(r)].assign(counter.data<int64_t>(), counter.data<int64_t>() + 3);
  }));
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(bitwise_equal(results[static_cast<size_t>(r)], rank_values(root, n))) << "rank " << r;
    EXPECT_EQ(ints[static_cast<size_t>(r)], (std::vector<int64_t>{root * 10, root * 10 + 1, root * 10 + 2}));
  }
}

TEST_P(CpuCommunicatorRanks, AllGatherPutsEveryRankInRankOrder) {
  const int ranks = GetParam();
  const int64_t n = 13;
  CpuCommunicatorGroup group(ranks, kFast);
  std::vector<std::vector<float>> results(static_cast<size_t>(ranks));
  expect_no_errors(run_ranks(ranks, [&](int r) {
    Tensor x = Tensor::from_vector(rank_values(r, n), Shape({n}));
    Tensor out = Tensor::empty({ranks, n});
    group.communicator(r).all_gather(x, out);
    results[static_cast<size_t>(r)] = out.to_vector();
  }));
  std::vector<float> expected;
  for (int q = 0; q < ranks; ++q) {
    auto v = rank_values(q, n);
    expected.insert(expected.end(), v.begin(), v.end());
  }
  for (int r = 0; r < ranks; ++r) EXPECT_TRUE(bitwise_equal(results[static_cast<size_t>(r)], expected));
}

TEST_P(CpuCommunicatorRanks, AsynchronousLaunchesCompleteInOrder) {
  const int ranks = GetParam();
  CpuCommunicatorGroup group(ranks, kFast);
  constexpr int kTensors = 12;
  std::vector<std::vector<std::vector<float>>> results(static_cast<size_t>(ranks));
  expect_no_errors(run_ranks(ranks, [&](int r) {
    Communicator& comm = group.communicator(r);
    std::vector<Tensor> xs;
    std::vector<CollectiveHandle> handles;
    for (int i = 0; i < kTensors; ++i) {
      xs.push_back(Tensor::from_vector(rank_values(r, 100 + i), Shape({100 + i})));
      handles.push_back(comm.all_reduce_async(xs.back(), ReduceOp::kSum, {.bucket = i}));
    }
    for (int i = kTensors - 1; i >= 0; --i) handles[static_cast<size_t>(i)].wait();  // any wait order
    for (auto& h : handles) EXPECT_TRUE(h.done());
    for (auto& x : xs) results[static_cast<size_t>(r)].push_back(x.to_vector());
  }));
  for (int r = 0; r < ranks; ++r) {
    for (int i = 0; i < kTensors; ++i) {
      EXPECT_TRUE(bitwise_equal(results[static_cast<size_t>(r)][static_cast<size_t>(i)],
                                left_to_right(ranks, 100 + i, ReduceOp::kSum)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, CpuCommunicatorRanks, ::testing::Values(1, 2, 3, 4, 8));

// Values where float addition is not associative: 1e8 + 1 rounds back to 1e8, so only the
// left-to-right order (((1e8 + 1) + -1e8) + 1) gives 1; pairwise or reversed orders give 0 or 2.
TEST(CpuCommunicator, SumsInRankOrderWhereTheOrderChangesTheFloatResult) {
  const std::vector<float> per_rank = {1e8f, 1.0f, -1e8f, 1.0f};
  CpuCommunicatorGroup group(4, kFast);
  std::vector<float> results(4);
  expect_no_errors(run_ranks(4, [&](int r) {
    Tensor x = Tensor::from_vector(std::vector<float>(37, per_rank[static_cast<size_t>(r)]), Shape({37}));
    group.communicator(r).all_reduce(x, ReduceOp::kSum);
    for (float v : x.to_vector()) EXPECT_EQ(v, x.to_vector()[0]);
    results[static_cast<size_t>(r)] = x.to_vector()[0];
  }));
  float expected = ((per_rank[0] + per_rank[1]) + per_rank[2]) + per_rank[3];
  float reversed = ((per_rank[3] + per_rank[2]) + per_rank[1]) + per_rank[0];
  ASSERT_NE(expected, reversed) << "the values must make the order visible";
  for (float v : results) EXPECT_EQ(v, expected);
}

TEST(CpuCommunicator, RejectsWrongTensors) {
  CpuCommunicatorGroup group(1, kFast);
  Communicator& comm = group.communicator(0);
  Tensor ints = Tensor::zeros({4}, DType::kI32);
  EXPECT_THROW(comm.all_reduce(ints, ReduceOp::kSum), Error);
  EXPECT_THROW(comm.all_reduce(Tensor(), ReduceOp::kSum), Error);
  EXPECT_THROW(comm.broadcast(Tensor::zeros({4}), 1), Error);
  EXPECT_THROW(comm.all_gather(Tensor::zeros({4}), Tensor::zeros({5})), Error);
  EXPECT_THROW(CpuCommunicatorGroup(0), Error);
  EXPECT_THROW(group.communicator(1), Error);
}

}  // namespace
}  // namespace tandem::distribute
