// run_summary.json parsed back field by field, its atomic write, and the run directory's name and
// creation (default and --run-dir), including the errors with path and errno.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "tools/trainer/run_outputs.h"

namespace tandem::tools {
namespace {

using testing::read_file;
using testing::TempDir;
using ::testing::HasSubstr;

train::RunSummary sample_summary() {
  train::RunSummary s;
  s.images_per_sec = 1234.5;
  s.step_time_p50_ms = 101.25;
  s.step_time_p95_ms = 130.5;
  s.breakdown.input_wait = 1.0;
  s.breakdown.copy = 0.5;
  s.breakdown.forward = 3.0;
  s.breakdown.backward = 4.0;
  s.breakdown.all_reduce = 1.0;
  s.breakdown.optimizer = 0.5;  // 10 s in all
  s.timed_steps = 100;
  s.steps = 1170;
  s.epochs = 3;
  s.final_metrics = {{"train_loss", 0.25}, {"eval_loss", 0.3}, {"eval_top1", 0.915}, {"eval_top5", 0.998}};
  s.replicas = 2;
  s.processes = 2;
  s.inter_process_ms_per_step = 1.75;
  s.global_batch_size = 256;
  s.per_replica_batch_size = 128;
  s.device = "cpu";
  s.dropped_examples = 96;
  s.wall_time_s = 812.5;
  s.stop_signal = 15;
  return s;
}

TEST(RunSummaryTest, EveryFieldReadsBack) {
  TempDir dir;
  std::filesystem::path path = dir.path() / "run_summary.json";
  write_run_summary(path, sample_summary());
  nlohmann::json j = nlohmann::json::parse(read_file(path));
  EXPECT_EQ(j.at("images_per_sec").get<double>(), 1234.5);
  EXPECT_EQ(j.at("step_time_ms").at("p50").get<double>(), 101.25);
  EXPECT_EQ(j.at("step_time_ms").at("p95").get<double>(), 130.5);
  EXPECT_EQ(j.at("timed_steps").get<int64_t>(), 100);
  const nlohmann::json& b = j.at("breakdown");
  struct Phase {
    const char* name;
    double seconds;
  };
  for (Phase p : {Phase{"input_wait", 1.0}, Phase{"copy", 0.5}, Phase{"forward", 3.0}, Phase{"backward", 4.0},
                  Phase{"all_reduce", 1.0}, Phase{"optimizer", 0.5}}) {
    SCOPED_TRACE(p.name);
    EXPECT_DOUBLE_EQ(b.at(p.name).at("ms_per_step").get<double>(), p.seconds * 1000 / 100);
    EXPECT_DOUBLE_EQ(b.at(p.name).at("fraction").get<double>(), p.seconds / 10);
  }
  EXPECT_EQ(b.size(), 6u);
  EXPECT_THAT(j.at("input_bound_verdict").get<std::string>(), HasSubstr("moderately input-bound"));
  const nlohmann::json& m = j.at("final_metrics");
  EXPECT_EQ(m.at("train_loss").get<double>(), 0.25);
  EXPECT_EQ(m.at("eval_loss").get<double>(), 0.3);
  EXPECT_EQ(m.at("eval_top1").get<double>(), 0.915);
  EXPECT_EQ(m.at("eval_top5").get<double>(), 0.998);
  EXPECT_EQ(j.at("replicas").get<int>(), 2);
  EXPECT_EQ(j.at("processes").get<int>(), 2);
  EXPECT_EQ(j.at("inter_process_ms_per_step").get<double>(), 1.75);
  EXPECT_EQ(j.at("global_batch_size").get<int64_t>(), 256);
  EXPECT_EQ(j.at("per_replica_batch_size").get<int64_t>(), 128);
  EXPECT_EQ(j.at("device").get<std::string>(), "cpu");
  EXPECT_EQ(j.at("steps").get<int64_t>(), 1170);
  EXPECT_EQ(j.at("epochs").get<int64_t>(), 3);
  EXPECT_EQ(j.at("dropped_examples").get<int64_t>(), 96);
  EXPECT_EQ(j.at("wall_time_s").get<double>(), 812.5);
  EXPECT_EQ(j.at("stop_signal").get<int>(), 15);
  EXPECT_EQ(j.at("throughput_unit").get<std::string>(), "img");
  EXPECT_EQ(j.size(), 18u) << j.dump(2);
}

TEST(RunSummaryTest, MetricsNotMeasuredAreLeftOutAndNaNIsNull) {
  train::RunSummary s;  // no timed steps, no eval
  s.final_metrics["train_loss"] = std::numeric_limits<double>::quiet_NaN();
  TempDir dir;
  std::filesystem::path path = dir.path() / "run_summary.json";
  write_run_summary(path, s);
  nlohmann::json j = nlohmann::json::parse(read_file(path));  // valid JSON despite the NaN
  EXPECT_TRUE(j.at("final_metrics").at("train_loss").is_null());
  EXPECT_FALSE(j.at("final_metrics").contains("eval_top1"));
  // No step was timed: no rate, step time, breakdown or verdict was measured, so none is written
  // (they used to read 0, as if measured).
  for (const char* field : {"images_per_sec", "step_time_ms", "breakdown", "input_bound_verdict"}) {
    EXPECT_TRUE(j.at(field).is_null()) << field << ": " << j.dump(2);
  }
  EXPECT_EQ(j.at("timed_steps").get<int64_t>(), 0);
}

TEST(RunSummaryTest, WriteReplacesAtomicallyAndLeavesNoTemporary) {
  TempDir dir;
  std::filesystem::path path = dir.path() / "run_summary.json";
  testing::write_file(path, "old");
  write_run_summary(path, sample_summary());
  EXPECT_TRUE(nlohmann::json::accept(read_file(path)));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "run_summary.json.tmp"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(RunSummaryTest, WriteFailureNamesThePath) {
  TempDir dir;
  std::filesystem::path path = dir.path() / "missing" / "run_summary.json";
  try {
    write_run_summary(path, sample_summary());
    FAIL() << "a missing directory must fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_THAT(e.what(), HasSubstr((dir.path() / "missing").string()));
    EXPECT_THAT(e.what(), HasSubstr("errno 2"));
  }
}

TEST(RunDirTest, DefaultIsConfigStemAndTimeUnderRuns) {
  TempDir dir;
  std::filesystem::path root = dir.path() / "runs";
  std::filesystem::path a = make_run_dir("configs/resnet.yaml", {}, root);
  EXPECT_EQ(a.parent_path(), root);
  EXPECT_TRUE(std::regex_match(a.filename().string(), std::regex(R"(resnet-\d{8}-\d{6})"))) << a;
  EXPECT_TRUE(std::filesystem::is_directory(a));
  // A second run started in the same second gets its own directory, never the first one's.
  std::filesystem::path b = make_run_dir("configs/resnet.yaml", {}, root);
  EXPECT_NE(a, b);
  EXPECT_TRUE(std::regex_match(b.filename().string(), std::regex(R"(resnet-\d{8}-\d{6}(-2)?)"))) << b;
  EXPECT_TRUE(std::filesystem::is_directory(b));
}

TEST(RunDirTest, RequestedDirectoryIsCreatedOrReused) {
  TempDir dir;
  std::filesystem::path want = dir.path() / "a" / "b" / "my-run";
  EXPECT_EQ(make_run_dir("configs/resnet.yaml", want), want);
  EXPECT_TRUE(std::filesystem::is_directory(want));
  testing::write_file(want / "keep.txt", "x");
  EXPECT_EQ(make_run_dir("configs/resnet.yaml", want), want);  // a resumed run reuses it
  EXPECT_EQ(read_file(want / "keep.txt"), "x");
}

TEST(RunDirTest, FailuresNameThePathAndErrno) {
  TempDir dir;
  testing::write_file(dir.path() / "file", "x");
  try {
    make_run_dir("c.yaml", dir.path() / "file");
    FAIL() << "a file is not a run directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr((dir.path() / "file").string()));
  }
  try {
    make_run_dir("c.yaml", {}, dir.path() / "file" / "runs");
    FAIL() << "runs under a file cannot be created";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir.path() / "file" / "runs").string()));
    EXPECT_THAT(e.what(), HasSubstr("errno 20"));  // ENOTDIR
  }
}

}  // namespace
}  // namespace tandem::tools
