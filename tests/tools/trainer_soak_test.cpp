// The soak test of issue #11: a run killed at random moments (SIGKILL, SIGTERM, SIGINT) and
// resumed, ten times, ends with the same weights, optimizer state and metrics.csv as a run that
// was never interrupted: bitwise equal checkpoint files, and every logged step's loss, top-1 and
// learning rate once, with the same values.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "tests/tools/trainer_cli_test_util.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;
using testing::read_text;

// 512 records, global batch 32: twelve epochs. Long enough (about a second on our machines) that a
// round's signal, at most 300 ms after the start, cannot come after the run's end: with three
// epochs a fast machine finished in the first long wait, and the soak soaked nothing.
constexpr int kRecords = 512, kBatch = 32, kEpochs = 12;
constexpr int64_t kSteps = kRecords / kBatch * kEpochs;

// (step, tag) -> value text for the deterministic tags; throughput rows only counted.
struct Metrics {
  std::map<std::pair<int64_t, std::string>, std::string> values;
  std::map<std::pair<int64_t, std::string>, int> counts;
};

Metrics read_metrics(const fs::path& csv) {
  Metrics m;
  for (const testing::MetricRow& row : testing::read_metric_rows(csv)) {
    const std::pair<int64_t, std::string> key{row.step, row.tag};
    ++m.counts[key];
    if (row.tag == "train/loss" || row.tag == "train/top1" || row.tag == "train/lr") m.values[key] = row.value;
  }
  return m;
}

// Waits (up to 60 s) until the log holds `lines` step lines ("| loss"), or the run has ended.
void wait_for_step_lines(const fs::path& log, int lines) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string text = read_text(log);
    int count = 0;
    for (size_t at = text.find("| loss"); at != std::string::npos; at = text.find("| loss", at + 1)) ++count;
    if (count >= lines || text.find("] done:") != std::string::npos) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

TEST(TrainerSoak, KilledAndResumedTenTimesEndsAsAnUninterruptedRun) {
  if (std::string reason = testing::cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const fs::path dir = fs::temp_directory_path() / fmt::format("tandem-soak-{}", getpid());
  fs::remove_all(dir);
  testing::write_fashion_tfrecords(dir, static_cast<size_t>(kRecords));
  std::ofstream(dir / "run.yaml") << testing::fashion_config(
      dir, fmt::format("{{global_batch_size: {}, epochs: {}, log_every_steps: 1}}", kBatch, kEpochs));
  auto args = [&](const std::string& run) {
    return fmt::format("--config {} --run-dir {} --set deterministic=true --set checkpoint.every_steps=5 "
                       "--set checkpoint.resume=auto",
                       (dir / "run.yaml").string(), (dir / run).string());
  };
  ASSERT_EQ(testing::run_trainer(args("straight"), dir / "straight.log"), 0) << read_text(dir / "straight.log");

  std::mt19937 random(20261202);
  const int signals[] = {SIGKILL, SIGTERM, SIGINT};
  int interrupted = 0;
  bool finished = false;
  for (int round = 0; round < 10 && !finished; ++round) {
    const fs::path log = dir / fmt::format("round-{}.log", round);
    pid_t trainer = testing::start_trainer(args("soaked"), log);
    if (round % 2 == 0) {
      // Mid-training: after 1 to 8 of this run's step lines (one per step), wherever that falls.
      const auto lines = static_cast<int>(1 + random() % 8);
      wait_for_step_lines(log, lines);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(random() % 300));  // anywhere, start-up included
    }
    const int signal_number = signals[round % 3];
    ::kill(trainer, signal_number);
    const int status = testing::wait_trainer(trainer);
    finished = status == 0;  // it may end before the signal arrives
    if (!finished) {
      ++interrupted;
      EXPECT_EQ(status, 128 + signal_number) << "round " << round << "\n" << read_text(log);
    }
  }
  EXPECT_GE(interrupted, 5) << "the runs ended before the signals: the soak test soaked nothing";
  if (!finished) {
    ASSERT_EQ(testing::run_trainer(args("soaked"), dir / "last.log"), 0) << read_text(dir / "last.log");
  }

  const std::string last = fmt::format("checkpoints/step-{:08d}", kSteps);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    ASSERT_TRUE(fs::exists(dir / "straight" / last / file)) << last << "/" << file;
    EXPECT_EQ(read_text(dir / "soaked" / last / file), read_text(dir / "straight" / last / file)) << file;
  }
  const Metrics straight = read_metrics(dir / "straight" / "metrics.csv");
  const Metrics soaked = read_metrics(dir / "soaked" / "metrics.csv");
  EXPECT_EQ(soaked.values, straight.values);
  for (const auto& [key, count] : soaked.counts) EXPECT_EQ(count, 1) << "step " << key.first << " " << key.second;
  EXPECT_EQ(soaked.counts.size(), straight.counts.size());
  EXPECT_EQ(straight.values.count({kSteps, "train/loss"}), 1u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::tools
