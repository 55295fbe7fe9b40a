// Several trainer processes on 127.0.0.1 as one run, as a user launches them on several nodes:
// the same weights, bit for bit, as one process with all the replicas (deterministic: true); a
// killed process stops the other with its name, and both resume to the weights of a run never
// killed; a process of another config or without the token is refused while the run goes on;
// mpirun (OpenMPI) launches them.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "engine/core/context.h"
#include "tests/support/ports.h"
#include "tests/tools/trainer_cli_test_util.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;
using testing::read_text;
using tandem::testing::free_port;


class TrainerProcessesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string reason = testing::cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
    dir_ = fs::temp_directory_path() / fmt::format("tandem-processes-{}-{}",
                                                   ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                                                   getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    testing::write_fashion_tfrecords(dir_, 256);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A run of `steps` steps at global batch 32, checkpointed every 4 steps.
  void write_config(const std::string& name, int64_t steps, const std::string& distribute = "{}") {
    std::ofstream(dir_ / name) << testing::fashion_config(
                                      dir_, fmt::format("{{global_batch_size: 32, steps: {}, log_every_steps: 2}}", steps))
                               << "deterministic: true\ncheckpoint: {every_steps: 4}\n"
                               << "distribute: " << distribute << "\n";
  }
  // Arguments of process `rank` of `processes`, each with `local` CPU replicas.
  std::string args(const std::string& config, const std::string& run, int processes, int rank, int local,
                   int port, const std::string& extra = "") const {
    std::string base = fmt::format("--config {} --run-dir {} --set devices=cpu:{} {}", (dir_ / config).string(),
                                   (dir_ / run).string(), local, extra);
    if (processes == 1) return base;
    return base + fmt::format(" --set distribute.processes={} --set distribute.process_rank={} --set "
                              "distribute.address=127.0.0.1 --set distribute.port={}",
                              processes, rank, port);
  }
  // Starts `processes` trainer processes of one run. Several processes run on a core each, as on
  // nodes of their own, so that every replica computes with as many threads as it would in one
  // process of all the replicas (oneDNN's sums depend on the thread count).
  std::vector<pid_t> start_together(const std::string& config, const std::string& run, int processes, int local,
                                    const std::string& extra = "", bool pinned = true) {
    const int port = free_port();
    const long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    std::vector<pid_t> pids;
    for (int p = 0; p < processes; ++p) {
      const std::string pin = processes == 1 || !pinned ? "" : fmt::format("taskset -c {}", p % cores);
      pids.push_back(testing::start_trainer(args(config, run, processes, p, local, port, extra),
                                            dir_ / fmt::format("{}-{}.log", run, p), pin));
    }
    return pids;
  }
  // Runs them to the end; each one's exit status.
  std::vector<int> run_together(const std::string& config, const std::string& run, int processes, int local,
                                const std::string& extra = "", bool pinned = true) {
    std::vector<pid_t> pids = start_together(config, run, processes, local, extra, pinned);
    std::vector<int> status;
    for (pid_t pid : pids) status.push_back(testing::wait_trainer(pid));
    return status;
  }
  std::string log(const std::string& run, int p) const { return read_text(dir_ / fmt::format("{}-{}.log", run, p)); }
  std::string weights(const std::string& run, int64_t step) const {
    return read_text(dir_ / run / "checkpoints" / fmt::format("step-{:08d}", step) / "model.safetensors");
  }

  fs::path dir_;
};

TEST_F(TrainerProcessesTest, TwoProcessesOfOneReplicaTrainTheWeightsOfOneProcessOfTwo) {
  write_config("run.yaml", 6);
  ASSERT_EQ(run_together("run.yaml", "one", 1, 2), std::vector<int>{0}) << log("one", 0);
  ASSERT_EQ(run_together("run.yaml", "two", 2, 1), (std::vector<int>{0, 0})) << log("two", 0) << log("two", 1);
  const std::string one = weights("one", 6);
  ASSERT_FALSE(one.empty());
  EXPECT_TRUE(weights("two", 6) == one) << "2 processes x 1 replica differ from 1 process x 2";
  EXPECT_NE(log("two", 0).find("2 replicas (2 processes x 1)"), std::string::npos) << log("two", 0);
  EXPECT_NE(log("two", 0).find("all 2 processes joined"), std::string::npos) << log("two", 0);
  EXPECT_NE(log("two", 1).find("process 1 done after 6 steps"), std::string::npos) << log("two", 1);
  EXPECT_TRUE(fs::exists(dir_ / "two" / "run_summary.json"));
  EXPECT_EQ(log("two", 1).find("step 2 ("), std::string::npos) << "only process 0 logs the run's progress";
}

TEST_F(TrainerProcessesTest, UnpinnedProcessesOfOneHostShareItsCoresInsteadOfOversubscribing) {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 2) GTEST_SKIP() << "needs 2 cores";
  // Under a cpuset narrower than the machine (a container's), processes count as pinned.
  if (available_cores() < cores) GTEST_SKIP() << "this process may use fewer than the machine's cores";
  write_config("run.yaml", 2);
  ASSERT_EQ(run_together("run.yaml", "one", 1, 2), std::vector<int>{0}) << log("one", 0);
  // Unpinned, each process once gave its one replica every core: 2 x cores threads on the host.
  ASSERT_EQ(run_together("run.yaml", "two", 2, 1, "", false), (std::vector<int>{0, 0})) << log("two", 0);
  const std::string shared = fmt::format("2 processes of this run share this host's {} cores: {} thread(s) per "
                                         "replica instead of {}",
                                         cores, cores / 2, cores);
  EXPECT_NE(log("two", 0).find(shared), std::string::npos) << log("two", 0);
  // The same threads per replica as one process of two replicas: the same bits.
  ASSERT_FALSE(weights("one", 2).empty());
  EXPECT_TRUE(weights("two", 2) == weights("one", 2)) << "unpinned 2 processes x 1 replica differ from 1 x 2";
}

TEST_F(TrainerProcessesTest, TwoProcessesOfTwoReplicasTrainTheWeightsOfOneProcessOfFour) {
  write_config("run.yaml", 4);
  ASSERT_EQ(run_together("run.yaml", "one", 1, 4), std::vector<int>{0}) << log("one", 0);
  ASSERT_EQ(run_together("run.yaml", "two", 2, 2), (std::vector<int>{0, 0})) << log("two", 0) << log("two", 1);
  EXPECT_TRUE(weights("two", 4) == weights("one", 4)) << "2 processes x 2 replicas differ from 1 process x 4";
}


// The newest checkpoint step of a run directory (0 when none).
int64_t newest_checkpoint(const fs::path& run) {
  int64_t newest = 0;
  if (!fs::exists(run / "checkpoints")) return 0;
  for (const auto& entry : fs::directory_iterator(run / "checkpoints")) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("step-") && fs::exists(entry.path() / "meta.json")) {
      newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));
    }
  }
  return newest;
}

TEST_F(TrainerProcessesTest, SyncBatchNormAcrossTwoProcessesEqualsOneProcessOfTwo) {
  // small_cnn's BatchNorm statistics over the global batch: the per-batch sums cross processes.
  write_config("run.yaml", 6, "{sync_batchnorm: true}");
  ASSERT_EQ(run_together("run.yaml", "one", 1, 2), std::vector<int>{0}) << log("one", 0);
  ASSERT_EQ(run_together("run.yaml", "two", 2, 1), (std::vector<int>{0, 0})) << log("two", 0) << log("two", 1);
  EXPECT_NE(log("two", 0).find("over the global batch of 2 replicas"), std::string::npos) << log("two", 0);
  EXPECT_TRUE(weights("two", 6) == weights("one", 6));
  write_config("plain.yaml", 6);
  ASSERT_EQ(run_together("plain.yaml", "plain", 1, 2), std::vector<int>{0}) << log("plain", 0);
  EXPECT_FALSE(weights("plain", 6) == weights("one", 6)) << "sync_batchnorm changed nothing: the test proves nothing";
}

TEST_F(TrainerProcessesTest, AKilledProcessStopsTheOtherByNameAndBothResumeToTheUnkilledWeights) {
  write_config("run.yaml", 100000, "{watchdog_timeout_s: 20}");
  std::vector<pid_t> pids = start_together("run.yaml", "killed", 2, 1);
  ASSERT_TRUE(testing::wait_for_log(dir_ / "killed-0.log", "step 20 (", 120)) << log("killed", 0);
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  EXPECT_EQ(testing::wait_trainer(pids[1]), 128 + SIGKILL);
  EXPECT_EQ(testing::wait_trainer(pids[0]), 1) << log("killed", 0);
  const double stopped_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_LT(stopped_after, 20.0) << "within the watchdog timeout";
  const std::string said = log("killed", 0);
  EXPECT_NE(said.find("process 1 on "), std::string::npos) << said;
  EXPECT_NE(said.find(fmt::format("(pid {}, replica 1) left without a word", pids[1])), std::string::npos) << said;

  // Both resume from the newest complete checkpoint and train 8 steps past it: the weights of a
  // run that was never killed.
  const int64_t saved = newest_checkpoint(dir_ / "killed");
  ASSERT_GE(saved, 4) << said;
  const int64_t end = saved + 8;
  const std::string more = fmt::format("--set checkpoint.resume=auto --set train.steps={}", end);
  ASSERT_EQ(run_together("run.yaml", "killed", 2, 1, more), (std::vector<int>{0, 0}))
      << log("killed", 0) << log("killed", 1);
  EXPECT_NE(log("killed", 0).find(fmt::format("resuming from")), std::string::npos) << log("killed", 0);
  ASSERT_EQ(run_together("run.yaml", "whole", 2, 1, fmt::format("--set train.steps={}", end)),
            (std::vector<int>{0, 0}))
      << log("whole", 0);
  EXPECT_TRUE(weights("killed", end) == weights("whole", end)) << "resumed after the kill, at step " << end;
}

TEST_F(TrainerProcessesTest, AStalledProcessIsNamedWithinTheWatchdogTimeout) {
  write_config("run.yaml", 100000, "{watchdog_timeout_s: 3}");
  std::vector<pid_t> pids = start_together("run.yaml", "stalled", 2, 1);
  ASSERT_TRUE(testing::wait_for_log(dir_ / "stalled-0.log", "step 10 (", 120)) << log("stalled", 0);
  const auto stopped_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pids[1], SIGSTOP), 0);
  EXPECT_EQ(testing::wait_trainer(pids[0]), 1) << log("stalled", 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  ::kill(pids[1], SIGKILL);
  ::kill(pids[1], SIGCONT);
  testing::wait_trainer(pids[1]);
  EXPECT_LT(took, 3.0 + 3.0 + 5.0) << "the watchdog, the grace period to name it, and slack";
  const std::string said = log("stalled", 0);
  EXPECT_NE(said.find("stalled: process 1 on "), std::string::npos) << said;
  EXPECT_NE(said.find(fmt::format("(pid {}, replica 1) did not reach it within distribute.watchdog_timeout_s (3 s)",
                                  pids[1])),
            std::string::npos)
      << said;
}

TEST_F(TrainerProcessesTest, TwoProcessesResumeAsOneProcessOfTheSameReplicas) {
  // The checkpoint of 2 processes x 1 replica, resumed by 1 process x 2 (the same global
  // replicas): the weights of the 2-process run continued.
  write_config("run.yaml", 8);
  ASSERT_EQ(run_together("run.yaml", "two", 2, 1, "--set train.steps=4"), (std::vector<int>{0, 0})) << log("two", 0);
  fs::copy(dir_ / "two", dir_ / "one", fs::copy_options::recursive);
  ASSERT_EQ(run_together("run.yaml", "two", 2, 1, "--set checkpoint.resume=auto"), (std::vector<int>{0, 0}))
      << log("two", 0);
  ASSERT_EQ(run_together("run.yaml", "one", 1, 2, "--set checkpoint.resume=auto"), std::vector<int>{0}) << log("one", 0);
  EXPECT_NE(log("one", 0).find("resuming from"), std::string::npos) << log("one", 0);
  EXPECT_TRUE(weights("one", 8) == weights("two", 8));
}

TEST_F(TrainerProcessesTest, AResumePointProcessZeroCannotUseStopsEveryProcessAtOnce) {
  write_config("run.yaml", 4, "{watchdog_timeout_s: 120}");
  const auto start = std::chrono::steady_clock::now();
  const std::string missing = (dir_ / "no-such-checkpoint").string();
  EXPECT_EQ(run_together("run.yaml", "run", 2, 1, "--set checkpoint.resume=" + missing), (std::vector<int>{1, 1}));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0)
      << "not the watchdog's 120 s";
  EXPECT_NE(log("run", 0).find(missing), std::string::npos) << log("run", 0);
  EXPECT_NE(log("run", 1).find("process 0 could not resume"), std::string::npos) << log("run", 1);
}

TEST_F(TrainerProcessesTest, AProcessOfAnotherConfigOrWithoutTheTokenIsRefusedAndTheRunGoesOn) {
  write_config("run.yaml", 6);
  const int port = free_port();
  const std::string token = "env TANDEM_DIST_TOKEN=s3cret";
  pid_t first = testing::start_trainer(args("run.yaml", "run", 2, 0, 1, port), dir_ / "p0.log", token);
  ASSERT_TRUE(testing::wait_for_log(dir_ / "p0.log", "joining the rendezvous", 60)) << read_text(dir_ / "p0.log");
  pid_t other = testing::start_trainer(args("run.yaml", "other", 2, 1, 1, port, "--set optimizer.lr=0.2"),
                                       dir_ / "other.log", token);
  EXPECT_EQ(testing::wait_trainer(other), 1);
  const std::string other_log = read_text(dir_ / "other.log");
  EXPECT_NE(other_log.find("refused this process: the config differs"), std::string::npos) << other_log;
  pid_t tokenless = testing::start_trainer(args("run.yaml", "tokenless", 2, 1, 1, port), dir_ / "tokenless.log");
  EXPECT_EQ(testing::wait_trainer(tokenless), 1);
  const std::string tokenless_log = read_text(dir_ / "tokenless.log");
  EXPECT_NE(tokenless_log.find("the token differs"), std::string::npos) << tokenless_log;
  EXPECT_EQ(tokenless_log.find("s3cret"), std::string::npos) << "the token is never shown";

  pid_t second = testing::start_trainer(args("run.yaml", "run", 2, 1, 1, port), dir_ / "p1.log", token);
  EXPECT_EQ(testing::wait_trainer(second), 0) << read_text(dir_ / "p1.log");
  EXPECT_EQ(testing::wait_trainer(first), 0) << read_text(dir_ / "p0.log");
  const std::string p0 = read_text(dir_ / "p0.log");
  EXPECT_NE(p0.find("refused a process from 127.0.0.1: the config differs"), std::string::npos) << p0;
  EXPECT_NE(p0.find("refused a process from 127.0.0.1: the token differs"), std::string::npos) << p0;
  EXPECT_FALSE(weights("run", 6).empty());
  EXPECT_EQ(read_text(dir_ / "run" / "config.yaml").find("s3cret"), std::string::npos);
}

TEST_F(TrainerProcessesTest, MpirunLaunchesTheProcesses) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "mpirun is missing (apt-get install openmpi-bin)";
  }
  write_config("run.yaml", 6);
  ASSERT_EQ(run_together("run.yaml", "one", 1, 2), std::vector<int>{0}) << log("one", 0);
  // OpenMPI gives the rank and size; the rendezvous address comes with -x. Each process on its
  // own core, as on a node of its own.
  const std::string command = fmt::format(
      "mpirun --allow-run-as-root --oversubscribe --bind-to core -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT={} "
      "--output-filename {} {} --config {} --run-dir {} --set devices=cpu:1",
      free_port(), (dir_ / "mpi-logs").string(), testing::kTrainer, (dir_ / "run.yaml").string(),
      (dir_ / "mpi").string());
  EXPECT_EQ(testing::run_trainer_command(command, dir_ / "mpirun.log"), 0) << read_text(dir_ / "mpirun.log");
  const std::string said = read_text(dir_ / "mpirun.log");
  EXPECT_NE(said.find("(from OpenMPI)"), std::string::npos) << said;
  EXPECT_TRUE(weights("mpi", 6) == weights("one", 6)) << "mpirun's 2 processes differ from 1 process x 2";
}

TEST_F(TrainerProcessesTest, ScalingStartsProcessesAndReportsTheTimeAcrossThem) {
  write_config("run.yaml", 8);
  const fs::path out = dir_ / "scaling";
  const std::string command =
      fmt::format("{} scaling --config {} --replicas 1,2 --processes 2 --steps 12 --mode weak --out {}",
                  testing::kTrainer, (dir_ / "run.yaml").string(), out.string());
  ASSERT_EQ(testing::run_trainer_command(command, dir_ / "scaling.log"), 0) << read_text(dir_ / "scaling.log");
  const std::string said = read_text(dir_ / "scaling.log");
  EXPECT_NE(said.find("2 replicas (2 processes x 1)"), std::string::npos) << said;
  EXPECT_NE(said.find("4 replicas (2 processes x 2)"), std::string::npos) << said;
  std::istringstream csv(read_text(out / "scaling.csv"));
  std::string header, line;
  std::getline(csv, header);
  EXPECT_TRUE(header.ends_with(",processes,inter_process_ms")) << header;
  int rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    const size_t last = line.rfind(','), before = line.rfind(',', last - 1);
    EXPECT_EQ(line.substr(before + 1, last - before - 1), "2") << line;
    EXPECT_GT(std::stod(line.substr(last + 1)), 0.0) << "time in Gloo per step: " << line;
  }
  EXPECT_EQ(rows, 2);
  EXPECT_TRUE(fs::exists(out / "process-1.log"));
}

}  // namespace
}  // namespace tandem::tools
