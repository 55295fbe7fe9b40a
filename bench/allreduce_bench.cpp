// CPU all-reduce across R replica threads (CpuCommunicator) for 1 MiB to 64 MiB, beside memcpy of
// the same size measured in the same run: algbw = bytes / time, as nccl-tests reports it, and its
// ratio to one thread's memcpy bandwidth. Then the same all-reduce across 2 processes of one rank
// each over Gloo (TCP on 127.0.0.1; the processes are threads with their own sockets here),
// beside 2 ranks in one process: what the scaling model of docs/DISTRIBUTE.md takes as measured.
// Usage: allreduce_bench [max_replicas (default 4)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/distribute/cpu_communicator.h"
#include "engine/distribute/process_link.h"

namespace {

using Clock = std::chrono::steady_clock;
using tandem::Tensor;
namespace dist = tandem::distribute;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Best of several timed rounds of memcpy of `bytes` (pages touched beforehand).
double memcpy_gbps(size_t bytes, int iterations) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    auto t = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      std::memcpy(dst.data(), src.data(), bytes);
      src[static_cast<size_t>(i) % bytes] = dst[0];  // keeps the copies from being elided
    }
    best = std::min(best, seconds_since(t) / iterations);
  }
  return static_cast<double>(bytes) / best / 1e9;
}

// Seconds per all-reduce (sum) of `bytes` across `ranks` threads, best of three rounds.
double allreduce_seconds(int ranks, size_t bytes, int iterations) {
  dist::CpuCommunicatorGroup group(ranks);
  const auto n = static_cast<int64_t>(bytes / sizeof(float));
  std::vector<double> per_round(3, 0.0);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      Tensor x = Tensor::zeros({n});
      dist::Communicator& comm = group.communicator(r);
      comm.all_reduce(x, dist::ReduceOp::kSum);  // warm-up: pages and caches
      for (int round = 0; round < 3; ++round) {
        comm.all_reduce(x, dist::ReduceOp::kSum);  // lines everyone up before the clock starts
        auto t = Clock::now();
        for (int i = 0; i < iterations; ++i) comm.all_reduce(x, dist::ReduceOp::kSum);
        if (r == 0) per_round[static_cast<size_t>(round)] = seconds_since(t) / iterations;
      }
    });
  }
  for (auto& t : threads) t.join();
  return *std::min_element(per_round.begin(), per_round.end());
}

// Seconds per all-reduce across `processes` processes of one rank each, on Gloo over loopback.
double across_processes_seconds(int processes, size_t bytes, int iterations, int port) {
  const auto n = static_cast<int64_t>(bytes / sizeof(float));
  double best = 0;
  std::vector<std::thread> threads;
  for (int p = 0; p < processes; ++p) {
    threads.emplace_back([&, p] {
      dist::ProcessLinkOptions o;
      o.spec = {.rank = p, .size = processes, .address = "127.0.0.1", .port = port, .source = "bench"};
      o.identity = {"bench", "1", ""};
      dist::ProcessLink link(o);
      dist::CpuCommunicatorGroup group(1, {}, link, false);
      Tensor x = Tensor::zeros({n});
      dist::Communicator& comm = group.communicator(0);
      comm.all_reduce(x, dist::ReduceOp::kSum);
      double mine = 1e30;
      for (int round = 0; round < 3; ++round) {
        comm.all_reduce(x, dist::ReduceOp::kSum);
        auto t = Clock::now();
        for (int i = 0; i < iterations; ++i) comm.all_reduce(x, dist::ReduceOp::kSum);
        mine = std::min(mine, seconds_since(t) / iterations);
      }
      if (p == 0) best = mine;
      link.goodbye();
    });
  }
  for (auto& t : threads) t.join();
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int max_ranks = argc > 1 ? std::atoi(argv[1]) : 4;
  std::printf("CPU all-reduce (sum, f32, in place) across replica threads; %u hardware threads\n",
              std::thread::hardware_concurrency());
  std::printf("%-8s %6s %12s %12s %14s %8s\n", "size", "ranks", "time (ms)", "algbw GB/s", "memcpy GB/s", "ratio");
  for (size_t mib : {1, 4, 16, 64}) {
    size_t bytes = mib << 20;
    int iterations = static_cast<int>(std::max<size_t>(4, (256u << 20) / bytes));
    double copy = memcpy_gbps(bytes, iterations);
    for (int ranks = 2; ranks <= max_ranks; ranks *= 2) {
      double s = allreduce_seconds(ranks, bytes, iterations);
      double algbw = static_cast<double>(bytes) / s / 1e9;
      std::printf("%4zu MiB %6d %12.3f %12.2f %14.2f %8.2f\n", mib, ranks, s * 1e3, algbw, copy, algbw / copy);
    }
  }
  if (!dist::ProcessLink::available()) {
    std::printf("\nacross processes: this build has no Gloo (apt-get install libgloo-dev)\n");
    return 0;
  }
  std::printf("\nall-reduce across 2 processes (Gloo, TCP over 127.0.0.1) beside 2 ranks in one process\n");
  std::printf("%-8s %14s %14s %16s %8s\n", "size", "gloo ms", "gloo GB/s", "in-process GB/s", "ratio");
  int port = 29500 + static_cast<int>(std::chrono::steady_clock::now().time_since_epoch().count() % 5000);
  for (size_t mib : {1, 4, 16, 64}) {
    size_t bytes = mib << 20;
    int iterations = static_cast<int>(std::max<size_t>(4, (128u << 20) / bytes));
    double inside = static_cast<double>(bytes) / allreduce_seconds(2, bytes, iterations) / 1e9;
    double s = across_processes_seconds(2, bytes, iterations, port++);
    double gbps = static_cast<double>(bytes) / s / 1e9;
    std::printf("%4zu MiB %14.3f %14.2f %16.2f %8.2f\n", mib, s * 1e3, gbps, inside, gbps / inside);
  }
  return 0;
}
