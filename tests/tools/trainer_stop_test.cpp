// Stopping, locking and limits as a user meets them with the built `trainer` binary: SIGTERM
// finishes the step, saves a checkpoint and exits 143, and the resumed run leaves metrics.csv with
// every step once; a second trainer on a busy run directory is told who holds it; a file-size
// limit is an error, not SIGXFSZ; data too small for one batch is refused before training.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "tests/tools/trainer_cli_test_util.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;
using testing::read_text;

class TrainerStopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string reason = testing::cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
    dir_ = fs::temp_directory_path() /
           fmt::format("tandem-stop-{}-{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(), getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string args(const std::string& config, const std::string& extra = "") const {
    return fmt::format("--config {} --run-dir {} {}", (dir_ / config).string(), (dir_ / "run").string(), extra);
  }

  fs::path dir_;
};

// (step, tag) of every row of metrics.csv, counted.
std::map<std::pair<int64_t, std::string>, int> metric_rows(const fs::path& csv) {
  std::map<std::pair<int64_t, std::string>, int> rows;
  for (const testing::MetricRow& row : testing::read_metric_rows(csv)) ++rows[{row.step, row.tag}];
  return rows;
}

TEST_F(TrainerStopTest, SigtermSavesAndTheResumedRunWritesEveryStepOnce) {
  testing::write_fashion_tfrecords(dir_, 512);
  std::ofstream(dir_ / "run.yaml") << testing::fashion_config(dir_, "{global_batch_size: 32, epochs: 500, log_every_steps: 2}");
  const fs::path log = dir_ / "first.log";
  pid_t trainer = testing::start_trainer(args("run.yaml"), log);
  ASSERT_TRUE(testing::wait_for_log(log, "step 10 (", 120)) << read_text(log);

  // A second trainer on the same run directory stops at once and names the first one.
  EXPECT_EQ(testing::run_trainer(args("run.yaml"), dir_ / "second.log"), 1);
  const std::string second = read_text(dir_ / "second.log");
  EXPECT_NE(second.find("is in use by another trainer"), std::string::npos) << second;
  EXPECT_NE(second.find(fmt::format("pid {}", trainer)), std::string::npos) << second;

  ASSERT_EQ(::kill(trainer, SIGTERM), 0);
  EXPECT_EQ(testing::wait_trainer(trainer), 143) << read_text(log);
  const std::string first = read_text(log);
  EXPECT_NE(first.find("stopped by signal 15"), std::string::npos) << first;
  nlohmann::json summary = nlohmann::json::parse(read_text(dir_ / "run" / "run_summary.json"));
  EXPECT_EQ(summary["stop_signal"], 15);
  const int64_t stopped_at = summary["steps"].get<int64_t>();
  ASSERT_GE(stopped_at, 10);
  EXPECT_TRUE(fs::exists(dir_ / "run" / "checkpoints" / fmt::format("step-{:08d}", stopped_at) / "model.safetensors"));
  for (const auto& [key, count] : metric_rows(dir_ / "run" / "metrics.csv")) {
    EXPECT_LE(key.first, stopped_at) << key.second << ": rows up to the checkpoint reach the file with it";
  }

  // Resumed in the same run directory for 6 or 7 more steps, to an even step (lines come every 2
  // steps): each logged step appears exactly once.
  const int64_t end = (stopped_at + 7) / 2 * 2;
  EXPECT_EQ(testing::run_trainer(args("run.yaml", fmt::format("--set checkpoint.resume=auto --set train.steps={}", end)),
                                 dir_ / "resumed.log"),
            0)
      << read_text(dir_ / "resumed.log");
  std::set<int64_t> loss_steps;
  for (const auto& [key, count] : metric_rows(dir_ / "run" / "metrics.csv")) {
    EXPECT_EQ(count, 1) << "step " << key.first << " " << key.second;
    if (key.second == "train/loss") loss_steps.insert(key.first);
  }
  for (int64_t s = 2; s <= end; s += 2) EXPECT_TRUE(loss_steps.count(s)) << "train/loss of step " << s;
  EXPECT_EQ(*loss_steps.rbegin(), end);
}

TEST_F(TrainerStopTest, SighupFromADroppedSessionStopsLikeSigterm) {
  // It once killed the run at once (exit 129): no checkpoint, no summary.
  testing::write_fashion_tfrecords(dir_, 256);
  std::ofstream(dir_ / "run.yaml") << testing::fashion_config(dir_, "{global_batch_size: 32, epochs: 500, log_every_steps: 2}");
  const fs::path log = dir_ / "hup.log";
  pid_t trainer = testing::start_trainer(args("run.yaml"), log);
  ASSERT_TRUE(testing::wait_for_log(log, "step 4 (", 120)) << read_text(log);
  ASSERT_EQ(::kill(trainer, SIGHUP), 0);
  EXPECT_EQ(testing::wait_trainer(trainer), 129) << read_text(log);
  nlohmann::json summary = nlohmann::json::parse(read_text(dir_ / "run" / "run_summary.json"));
  EXPECT_EQ(summary["stop_signal"], 1);
  const int64_t stopped_at = summary["steps"].get<int64_t>();
  EXPECT_TRUE(fs::exists(dir_ / "run" / "checkpoints" / fmt::format("step-{:08d}", stopped_at) / "model.safetensors"));
}

TEST_F(TrainerStopTest, AFileSizeLimitIsAnErrorThatKeepsTheProcessAlive) {
  testing::write_fashion_tfrecords(dir_, 256);
  std::ofstream(dir_ / "run.yaml") << testing::fashion_config(dir_, "{global_batch_size: 32, epochs: 1}");
  // 64 KiB: config.yaml and metrics fit, a checkpoint of small_cnn does not.
  const std::string command = fmt::format("bash -c 'ulimit -f 64; exec {} {}' > {} 2>&1", testing::kTrainer,
                                          args("run.yaml"), (dir_ / "log").string());
  const int status = std::system(command.c_str());
  const std::string log = read_text(dir_ / "log");
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << "\n" << log;
  EXPECT_EQ(WEXITSTATUS(status), 1) << log;
  EXPECT_NE(log.find("error [ResourceExhausted]"), std::string::npos) << log;
}

TEST_F(TrainerStopTest, DataTooSmallForOneBatchIsRefusedBeforeTraining) {
  testing::write_fashion_tfrecords(dir_, 50);
  std::ofstream(dir_ / "run.yaml") << testing::fashion_config(dir_, "{global_batch_size: 128, steps: 100}");
  EXPECT_EQ(testing::run_trainer(args("run.yaml"), dir_ / "log"), 1);
  const std::string log = read_text(dir_ / "log");
  EXPECT_NE(log.find("gets 50 record(s) per epoch"), std::string::npos) << log;
  EXPECT_NE(log.find("no epoch would give a training step"), std::string::npos) << log;
}

}  // namespace
}  // namespace tandem::tools
