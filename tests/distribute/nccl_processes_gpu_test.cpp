// NCCL across processes on real GPUs (ctest label `gpu`): process 0's unique id through the
// rendezvous, then each process's ranks of one communicator (ncclCommInitRank). The "processes"
// are threads here, each with its own rendezvous client and GPU, as separate processes would
// have. One GPU: a single process through that path; two GPUs or more: two processes of one GPU
// each. Skips, saying why, where there is no driver, plugin or GPU.
#include <gtest/gtest.h>

#include <vector>

#include "engine/distribute/nccl_communicator.h"
#include "engine/distribute/process_link.h"
#include "tests/distribute/distribute_test_util.h"
#include "tests/distribute/gpu_test_util.h"
#include "tests/support/ports.h"

namespace tandem::distribute {
namespace {

using namespace std::chrono_literals;
using testing::expect_no_errors;
using testing::run_ranks;

Tensor on(int device, std::vector<float> values) {
  const auto n = static_cast<int64_t>(values.size());
  return Tensor::from_vector(values, Shape({n})).to(Device::cuda(device));
}

ProcessLinkOptions link_options(int rank, int size, int port) {
  ProcessLinkOptions o;
  o.spec = {.rank = rank, .size = size, .address = "127.0.0.1", .port = port, .source = "test"};
  o.identity = {"cfg", "1", ""};
  o.local_replicas = 1;
  o.timeout = 60s;
  return o;
}

// Process p of `processes` on cuda:p: every collective over all of them, with global ranks.
void run_process(int p, int processes, int port) {
  ProcessLink link(link_options(p, processes, port));
  NcclCommunicatorGroup group({p}, CommunicatorOptions{60s}, link);
  Communicator& comm = group.communicator(0);
  EXPECT_EQ(comm.rank(), p);
  EXPECT_EQ(comm.world_size(), processes);
  const float v = static_cast<float>(p + 1);
  const float sum = static_cast<float>(processes * (processes + 1) / 2);
  Tensor x = on(p, std::vector<float>(1001, v));
  comm.all_reduce(x, ReduceOp::kSum);
  for (float got : x.to(Device::cpu()).to_vector()) ASSERT_EQ(got, sum);
  Tensor y = on(p, {v});
  comm.all_reduce(y, ReduceOp::kAverage);
  EXPECT_EQ(y.to(Device::cpu()).to_vector(), std::vector<float>{sum / static_cast<float>(processes)});
  Tensor b = on(p, {v, -v});
  comm.broadcast(b, processes - 1);
  EXPECT_EQ(b.to(Device::cpu()).to_vector(), (std::vector<float>{float(processes), -float(processes)}));
  Tensor all = Tensor::zeros({processes}, DType::kF32, Device::cuda(p));
  comm.all_gather(on(p, {v}), all);
  std::vector<float> gathered = all.to(Device::cpu()).to_vector();
  for (int q = 0; q < processes; ++q) EXPECT_EQ(gathered[static_cast<size_t>(q)], float(q + 1));
  link.goodbye();
}

TEST(NcclProcessesGpu, OneProcessThroughTheRendezvous) {
  REQUIRE_GPUS(1);
  if (!ProcessLink::available()) GTEST_SKIP() << "this build has no Gloo (apt-get install libgloo-dev)";
  run_process(0, 1, testing::free_port());
}

TEST(NcclProcessesGpu, TwoProcessesOfOneGpuEach) {
  REQUIRE_GPUS(2);
  if (!ProcessLink::available()) GTEST_SKIP() << "this build has no Gloo (apt-get install libgloo-dev)";
  const int port = testing::free_port();
  expect_no_errors(run_ranks(2, [&](int p) { run_process(p, 2, port); }, 120s));
}

}  // namespace
}  // namespace tandem::distribute
