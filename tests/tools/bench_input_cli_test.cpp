// `trainer bench-input --config RUN.yaml` measures what training would load: the train section's
// per-replica batch, not the data section's default; and a small dataset, read in many short
// passes, logs each tuner's start once, not once per pass.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/tools/trainer_cli_test_util.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;

TEST(BenchInputCli, MeasuresTheBatchTrainingLoadsAndLogsEachTunerStartOnce) {
  if (std::string reason = testing::cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  fs::path dir = fs::temp_directory_path() / fmt::format("tandem-bench-input-{}", getpid());
  fs::remove_all(dir);
  testing::write_fashion_tfrecords(dir, 256);
  std::ofstream(dir / "run.yaml") << testing::fashion_config(dir, "{per_replica_batch_size: 64, epochs: 1}");

  const std::string args = fmt::format("bench-input --config {} --seconds 2", (dir / "run.yaml").string());
  ASSERT_EQ(testing::run_trainer(args + " --json", dir / "json.log"), 0) << testing::read_text(dir / "json.log");
  const std::string out = testing::read_text(dir / "json.log");
  nlohmann::json report = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(report["batch_size"], 64) << out;

  ASSERT_EQ(testing::run_trainer(args, dir / "text.log"), 0);
  const std::string log = testing::read_text(dir / "text.log");
  const std::regex start(R"(autotune: (.*) num_parallel_calls = \d+ to start)");
  std::map<std::string, int> starts;
  for (std::sregex_iterator it(log.begin(), log.end(), start), end; it != end; ++it) ++starts[(*it)[1].str()];
  for (const auto& [stage, count] : starts) EXPECT_EQ(count, 1) << stage << "\n" << log;

  // Every comparison with NaN is false, so a plain range check once let "nan" run (forever).
  for (const char* bad : {"--seconds nan", "--seconds inf", "--seconds 0", "--step-time-ms nan"}) {
    EXPECT_EQ(testing::run_trainer(fmt::format("bench-input --config {} {}", (dir / "run.yaml").string(), bad),
                                   dir / "bad.log"),
              2)
        << bad;
    EXPECT_NE(testing::read_text(dir / "bad.log").find("is not a finite number in"), std::string::npos) << bad;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::tools
