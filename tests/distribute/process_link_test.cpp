// Processes joined by the rendezvous and Gloo over TCP on 127.0.0.1. Each "process" here is a
// thread with its own rendezvous client, Gloo contexts and communicator group (the real
// multi-process runs are in tests/tools): who may join, what a departed process looks like, and
// cross-process collectives against one process holding every rank, bit for bit where ordered.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/core/random.h"
#include "engine/distribute/bootstrap/client.h"
#include "engine/distribute/bootstrap/server.h"
#include "engine/distribute/cpu_communicator.h"
#include "engine/distribute/process_link.h"
#include "tests/distribute/distribute_test_util.h"
#include "tests/support/ports.h"

namespace tandem::distribute {
namespace {

using testing::caught;
using testing::expect_no_errors;
using testing::run_ranks;
using testing::free_port;


bootstrap::JoinOptions join(int port, int rank, int size, std::string config = "cfg", std::string token = "") {
  return {.address = "127.0.0.1", .port = port, .rank = rank, .size = size,
          .identity = {.config_hash = std::move(config), .version = "1", .run_id = ""}, .token = std::move(token),
          .timeout = std::chrono::seconds(20)};
}

TEST(Rendezvous, ProcessesJoinShareValuesAndKnowEachOthersHosts) {
  const int port = free_port();
  std::vector<std::string> got(3);
  expect_no_errors(run_ranks(3, [&](int r) {
    bootstrap::Client c(join(port, r, 3));
    EXPECT_EQ(c.size(), 3);
    EXPECT_EQ(c.hosts()[static_cast<size_t>(r)], bootstrap::host_name());
    c.set("key-" + std::to_string(r), "value " + std::to_string(r));
    got[static_cast<size_t>(r)] = c.get("key-" + std::to_string((r + 1) % 3));
    EXPECT_EQ(c.departed(), "");
    // Process 0's server ends with it: it leaves last, once everyone has had its answers.
    c.set("done-" + std::to_string(r), "");
    c.goodbye();  // a finished process leaving is not a failure
    if (r == 0) {
      for (int q = 1; q < 3; ++q) c.get("done-" + std::to_string(q));
    }
  }));
  EXPECT_EQ(got, (std::vector<std::string>{"value 1", "value 2", "value 0"}));
}

TEST(Rendezvous, AnotherConfigOrAWrongTokenIsRefusedAndTheRunGoesOn) {
  const int port = free_port();
  std::vector<std::string> refusals;
  expect_no_errors(run_ranks(2, [&](int r) {
    if (r == 1) {
      // Strays first: another config, then the right config without the token.
      for (auto stray : {join(port, 1, 2, "other-cfg", "tok"), join(port, 1, 2, "cfg", "")}) {
        try {
          bootstrap::Client c(stray);
          ADD_FAILURE() << "a stray process joined";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
          refusals.push_back(e.what());
        }
      }
    }
    bootstrap::Client c(join(port, r, 2, "cfg", "tok"));
    EXPECT_EQ(c.size(), 2);
  }));
  ASSERT_EQ(refusals.size(), 2u);
  EXPECT_NE(refusals[0].find("the config differs"), std::string::npos) << refusals[0];
  EXPECT_NE(refusals[0].find("config other-cfg"), std::string::npos) << refusals[0];
  EXPECT_NE(refusals[0].find("process 0 on"), std::string::npos) << refusals[0];
  EXPECT_NE(refusals[1].find("the token differs"), std::string::npos) << refusals[1];
  EXPECT_EQ(refusals[1].find("tok"), refusals[1].find("token"));  // the token itself is never shown
}

TEST(Rendezvous, AProcessWhoseConnectionDropsWithoutGoodbyeIsNamed) {
  const int port = free_port();
  std::string seen;
  expect_no_errors(run_ranks(2, [&](int r) {
    bootstrap::Client c(join(port, r, 2));
    if (r == 1) {
      c.set("joined", "1");
      c.goodbye();  // a finished process: not a departure
      return;
    }
    c.get("joined");
    EXPECT_EQ(c.departed(), "");
  }));
  // Now one that vanishes: its socket closes without kBye.
  const int port2 = free_port();
  expect_no_errors(run_ranks(2, [&](int r) {
    if (r == 0) {
      bootstrap::Client c(join(port2, 0, 2));
      c.get("gone");
      for (int i = 0; i < 200 && seen.empty(); ++i) {
        seen = c.departed();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return;
    }
    bootstrap::Socket s = bootstrap::connect_to("127.0.0.1", port2, bootstrap::Clock::now() + std::chrono::seconds(20));
    bootstrap::Hello h{.rank = 1, .size = 2, .host = "host-b", .pid = 4242, .identity = {"cfg", "1", ""}};
    bootstrap::send_frame(s.fd(), bootstrap::encode(h));
    std::string welcome;
    ASSERT_TRUE(bootstrap::recv_frame(s.fd(), &welcome, bootstrap::Clock::now() + std::chrono::seconds(20)));
    bootstrap::send_frame(s.fd(), bootstrap::FrameWriter().u32(2).str("gone").str("").bytes());  // set
  }));
  EXPECT_EQ(seen, "process 1 on host-b (pid 4242, replica 1) left without a word (killed, or its host is down)");
}

std::vector<float> values(int rank, int64_t n) {
  Generator g(500 + static_cast<uint64_t>(rank));
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = g.normal() * 100.0f;
  return v;
}

struct Results {
  std::vector<std::vector<float>> reduced, averaged, broadcast, gathered, reduced_bf16, averaged_bf16;
};

// x's values as bf16 (each rounded to nearest even), then all-reduced in bf16; widened back.
std::vector<float> all_reduce_bf16(CpuCommunicator& c, const std::vector<float>& x, ReduceOp op) {
  Tensor t = Tensor::empty({static_cast<int64_t>(x.size())}, DType::kBF16);
  auto* bits = static_cast<uint16_t*>(t.raw_data());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = float_to_bf16(x[i]).bits;
  c.all_reduce(t, op);
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_float(BFloat16{bits[i]});
  return out;
}

// The collectives of `world` ranks: P processes of L ranks each (link), or one process of all.
Results run_collectives(int processes, int local, bool ordered, int64_t n) {
  const int world = processes * local;
  Results out;
  out.reduced.resize(static_cast<size_t>(world));
  out.averaged = out.broadcast = out.gathered = out.reduced_bf16 = out.averaged_bf16 = out.reduced;
  auto body = [&](CpuCommunicatorGroup& group, int base, ProcessLink* link) {
    expect_no_errors(run_ranks(local, [&](int l) {
      CpuCommunicator& c = group.communicator(l);
      const int g = base + l;
      EXPECT_EQ(c.rank(), g);
      EXPECT_EQ(c.world_size(), world);
      Tensor x = Tensor::from_vector(values(g, n), Shape{n});
      c.all_reduce(x, ReduceOp::kSum);
      out.reduced[static_cast<size_t>(g)] = x.to_vector();
      Tensor y = Tensor::from_vector(values(g, n), Shape{n});
      c.all_reduce(y, ReduceOp::kAverage);
      out.averaged[static_cast<size_t>(g)] = y.to_vector();
      Tensor b = Tensor::from_vector(values(g, 7), Shape{7});
      c.broadcast(b, world - 1);
      out.broadcast[static_cast<size_t>(g)] = b.to_vector();
      Tensor all = Tensor::zeros({world * 3}, DType::kF32);
      c.all_gather(Tensor::from_vector(values(g, 3), Shape{3}), all);
      out.gathered[static_cast<size_t>(g)] = all.to_vector();
      out.reduced_bf16[static_cast<size_t>(g)] = all_reduce_bf16(c, values(g, n), ReduceOp::kSum);
      out.averaged_bf16[static_cast<size_t>(g)] = all_reduce_bf16(c, values(g, n), ReduceOp::kAverage);
    }));
    if (link != nullptr) link->barrier(0);  // every process is through before any leaves
  };
  if (processes == 1) {
    CpuCommunicatorGroup group(world, CommunicatorOptions{std::chrono::seconds(20)});
    body(group, 0, nullptr);
    return out;
  }
  const int port = free_port();
  expect_no_errors(run_ranks(processes, [&](int p) {
    ProcessLinkOptions o;
    o.spec = {.rank = p, .size = processes, .address = "127.0.0.1", .port = port, .source = "test"};
    o.identity = {"cfg", "1", ""};
    o.local_replicas = local;
    o.timeout = std::chrono::seconds(20);
    ProcessLink link(o);
    CpuCommunicatorGroup group(local, CommunicatorOptions{std::chrono::seconds(20)}, link, ordered);
    body(group, p * local, &link);
  }));
  return out;
}

TEST(ProcessLink, TwoProcessesOfOneRankEqualOneProcessOfTwoBitForBit) {
  if (!ProcessLink::available()) GTEST_SKIP() << "this build has no Gloo (apt-get install libgloo-dev)";
  for (bool ordered : {false, true}) {
    Results one = run_collectives(1, 2, false, 1001);
    Results two = run_collectives(2, 1, ordered, 1001);
    EXPECT_EQ(two.reduced, one.reduced) << "ordered " << ordered;
    EXPECT_EQ(two.averaged, one.averaged);
    EXPECT_EQ(two.broadcast, one.broadcast);
    EXPECT_EQ(two.gathered, one.gathered);
    EXPECT_EQ(two.reduced_bf16, one.reduced_bf16) << "ordered " << ordered;
    EXPECT_EQ(two.averaged_bf16, one.averaged_bf16);
  }
}

TEST(ProcessLink, TwoProcessesOfTwoRanksEqualOneProcessOfFourOrderedAndCloseOtherwise) {
  if (!ProcessLink::available()) GTEST_SKIP() << "this build has no Gloo (apt-get install libgloo-dev)";
  Results one = run_collectives(1, 4, false, 3001);
  Results ordered = run_collectives(2, 2, true, 3001);
  EXPECT_EQ(ordered.reduced, one.reduced);
  EXPECT_EQ(ordered.averaged, one.averaged);
  EXPECT_EQ(ordered.broadcast, one.broadcast);
  EXPECT_EQ(ordered.gathered, one.gathered);
  EXPECT_EQ(ordered.reduced_bf16, one.reduced_bf16);
  EXPECT_EQ(ordered.averaged_bf16, one.averaged_bf16);
  Results ring = run_collectives(2, 2, false, 3001);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ring.reduced[static_cast<size_t>(r)], ring.reduced[0]) << "every rank holds the same bits";
    for (size_t i = 0; i < ring.reduced[0].size(); ++i) {
      ASSERT_NEAR(ring.reduced[static_cast<size_t>(r)][i], one.reduced[0][i], 1e-3f) << i;
    }
  }
  EXPECT_EQ(ring.broadcast, one.broadcast);
  EXPECT_EQ(ring.gathered, one.gathered);
  // bf16 on the ring: the fold in each process and one hop each rounds (two roundings where the
  // single process rounds once), the same bits everywhere, within a few bf16 steps of its sum.
  double worst = 0;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ring.reduced_bf16[static_cast<size_t>(r)], ring.reduced_bf16[0]) << "every rank holds the same bits";
    EXPECT_EQ(ring.averaged_bf16[static_cast<size_t>(r)], ring.averaged_bf16[0]);
  }
  double largest = 0;
  for (size_t i = 0; i < ring.reduced_bf16[0].size(); ++i) {
    largest = std::max(largest, std::fabs(double{one.reduced_bf16[0][i]}));
    worst = std::max(worst, std::fabs(double{ring.reduced_bf16[0][i]} - one.reduced_bf16[0][i]));
  }
  EXPECT_LT(worst / largest, 3 * 0.0078125);  // a margin over two roundings of at most 2^-8 each
  EXPECT_GT(worst, 0.0) << "the ring rounded exactly as the single fold: was it in bf16?";
}

TEST(Rendezvous, AProcessThatFailsIsNamedWithItsReason) {
  const int port = free_port();
  std::string seen;
  expect_no_errors(run_ranks(2, [&](int r) {
    bootstrap::Client c(join(port, r, 2));
    if (r == 1) {
      c.report_failure("replica 1 failed: data: a corrupt record");
      c.set("reported", "");
      return;
    }
    c.get("reported");
    for (int i = 0; i < 200 && seen.find("failed") == std::string::npos; ++i) {
      seen = c.departed();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }));
  EXPECT_NE(seen.find("process 1 on "), std::string::npos) << seen;
  EXPECT_NE(seen.find("replica 1) failed: replica 1 failed: data: a corrupt record"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("left without a word"), std::string::npos) << seen;
}

TEST(Rendezvous, ProcessZerosResultOrItsErrorReachesEveryProcess) {
  const int port = free_port();
  std::vector<std::string> values(2);
  std::vector<std::string> errors(2);
  expect_no_errors(run_ranks(2, [&](int r) {
    bootstrap::Client c(join(port, r, 2));
    values[static_cast<size_t>(r)] = c.share_from_process_zero("value", "count", [] { return std::string("42"); });
    try {
      c.share_from_process_zero("broken", "read the disk", []() -> std::string {
        throw Error(ErrorCode::kDataLoss, "a bad sector");
      });
    } catch (const Error& e) {
      errors[static_cast<size_t>(r)] = fmt::format("{}: {}", error_code_name(e.code()), e.what());
    }
    c.set("done-" + std::to_string(r), "");
    c.goodbye();
    if (r == 0) c.get("done-1");  // process 0's server ends with it
  }));
  EXPECT_EQ(values, (std::vector<std::string>{"42", "42"}));
  EXPECT_NE(errors[0].find("a bad sector"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("process 0 could not read the disk: a bad sector"), std::string::npos) << errors[1];
  EXPECT_EQ(errors[1].find("Aborted"), 0u) << errors[1];
}

TEST(Rendezvous, AProcessWithAnotherReplicaCountIsRefused) {
  const int port = free_port();
  std::string refused;
  expect_no_errors(run_ranks(2, [&](int r) {
    if (r == 1) {
      auto three = join(port, 1, 2);
      three.local_replicas = 3;
      try {
        bootstrap::Client c(three);
      } catch (const Error& e) {
        refused = e.what();
      }
    }
    bootstrap::Client c(join(port, r, 2));
  }));
  EXPECT_NE(refused.find("every process must run as many replicas"), std::string::npos) << refused;
  EXPECT_NE(refused.find("3 replica(s)"), std::string::npos) << refused;
}

TEST(Rendezvous, AProcessInAnotherRunDirectoryIsRefused) {
  const int port = free_port();
  std::string refused;
  expect_no_errors(run_ranks(2, [&](int r) {
    auto options = join(port, r, 2);
    options.identity.run_dir = "runs/a";
    if (r == 1) {
      auto elsewhere = options;
      elsewhere.identity.run_dir = "runs/b";
      try {
        bootstrap::Client c(elsewhere);
        ADD_FAILURE() << "a process of another run directory joined";
      } catch (const Error& e) {
        refused = e.what();
      }
    }
    bootstrap::Client c(options);
  }));
  EXPECT_NE(refused.find("the run directory differs ('runs/b' against 'runs/a'"), std::string::npos) << refused;
}

TEST(Rendezvous, SlowOrStrayClientsNeverHoldUpTheJoin) {
  const int port = free_port();
  std::vector<bootstrap::Socket> strays;
  const auto start = bootstrap::Clock::now();
  expect_no_errors(run_ranks(3, [&](int r) {
    if (r == 1) {
      // Four clients that send one byte of a frame header and nothing more: the server once read
      // each for 10 s before it served anyone else (40 s).
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // process 0's server is up
      for (int i = 0; i < 4; ++i) {
        strays.push_back(bootstrap::connect_to("127.0.0.1", port, bootstrap::Clock::now() + std::chrono::seconds(20)));
        ASSERT_EQ(::send(strays.back().fd(), "\x05", 1, MSG_NOSIGNAL), 1);
      }
    }
    bootstrap::Client c(join(port, r, 3));
    EXPECT_EQ(c.size(), 3);
  }));
  const double seconds = std::chrono::duration<double>(bootstrap::Clock::now() - start).count();
  EXPECT_LT(seconds, 8.0) << "the strays held up the join";
}

TEST(Rendezvous, AMissingProcessIsNamedByProcessZero) {
  // Process 0 of 3 with process 1 joined (a raw connection that stays) and process 2 never coming.
  const int port = free_port();
  std::string error;
  std::atomic<bool> done{false};
  std::thread joined([&] {
    bootstrap::Socket s = bootstrap::connect_to("127.0.0.1", port, bootstrap::Clock::now() + std::chrono::seconds(20));
    bootstrap::Hello h{.rank = 1, .size = 3, .host = bootstrap::host_name(), .pid = 4242, .identity = {"cfg", "1", ""}};
    bootstrap::send_frame(s.fd(), bootstrap::encode(h));
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  auto options = join(port, 0, 3);
  options.timeout = std::chrono::milliseconds(3000);
  try {
    bootstrap::Client c(options);
  } catch (const Error& e) {
    error = fmt::format("{}: {}", error_code_name(e.code()), e.what());
  }
  done = true;
  joined.join();
  EXPECT_NE(error.find("DeadlineExceeded: process 0 waited 3 s at the rendezvous"), std::string::npos) << error;
  EXPECT_NE(error.find("for the run's 3 processes, and process(es) 2 are not there (never joined, or left)"),
            std::string::npos)
      << error;

  // Another process waits on a process 0 whose server is up but which has not joined itself.
  const int port2 = free_port();
  const bootstrap::Hello zero{
      .rank = 0, .size = 2, .host = bootstrap::host_name(), .pid = 1, .identity = {"cfg", "1", ""}};
  bootstrap::Server server("127.0.0.1", port2, zero);
  auto other = join(port2, 1, 2);
  other.timeout = std::chrono::milliseconds(1500);
  try {
    bootstrap::Client c(other);
    ADD_FAILURE() << "joined a run whose process 0 never came";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not all joined (process 0's error names the missing ranks)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::distribute
