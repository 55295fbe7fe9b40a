// The main job end to end: the built `trainer` binary trains a small model on a small real
// subset of Fashion-MNIST (Debian's dataset-fashion-mnist, converted here to TFRecords) and
// the loss it reports in metrics.csv falls; the run directory holds every promised output.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/tools/trainer_cli_test_util.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;

using testing::cli_skip_reason;
using testing::kTrainer;

// train/loss values of metrics.csv (wall_time,step,tag,value), in order.
std::vector<double> losses(const fs::path& csv) {
  std::ifstream in(csv);
  std::string line;
  std::vector<double> out;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream fields(line);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    if (cells.size() == 4 && cells[2] == "train/loss") out.push_back(std::stod(cells[3]));
  }
  return out;
}

TEST(TrainerEndToEnd, SmallRealSubsetLowersTheLoss) {
  if (std::string reason = cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  fs::path dir = fs::temp_directory_path() / fmt::format("tandem-e2e-{}", getpid());
  fs::remove_all(dir);
  testing::write_fashion_tfrecords(dir, 1024);
  std::ofstream(dir / "run.yaml") << testing::fashion_config(dir, "{global_batch_size: 32, epochs: 2, log_every_steps: 8}");
  std::string command = fmt::format("{} --config {} --run-dir {} > {} 2>&1", kTrainer, (dir / "run.yaml").string(),
                                    (dir / "run").string(), (dir / "log.txt").string());
  ASSERT_EQ(std::system(command.c_str()), 0) << "trainer failed; see " << (dir / "log.txt").string();

  std::vector<double> loss = losses(dir / "run" / "metrics.csv");
  ASSERT_GE(loss.size(), 6u);
  EXPECT_LT(loss.back(), 0.7 * loss.front()) << "first " << loss.front() << ", last " << loss.back();
  nlohmann::json summary = nlohmann::json::parse(std::ifstream(dir / "run" / "run_summary.json"));
  EXPECT_EQ(summary["steps"], 64);
  EXPECT_EQ(summary["global_batch_size"], 32);
  EXPECT_GT(summary["images_per_sec"].get<double>(), 0.0);
  EXPECT_TRUE(fs::exists(dir / "run" / "config.yaml"));
  EXPECT_TRUE(fs::exists(dir / "run" / "checkpoints" / "step-00000064" / "model.safetensors"));
  bool events = false;
  for (const auto& entry : fs::directory_iterator(dir / "run")) {
    events = events || entry.path().filename().string().starts_with("events.out.tfevents.");
  }
  EXPECT_TRUE(events);
  fs::remove_all(dir);
}

// precision: bf16 on the CPU: the run trains, and the log's first lines say the precision in effect
// and the instructions it runs on (or, without AVX512-BF16 and AMX, warn that bf16 is slow there).
TEST(TrainerEndToEnd, ABf16RunSaysItsPrecisionAndInstructionsFirst) {
  TANDEM_REQUIRE_BF16_CPU();
  if (std::string reason = cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  fs::path dir = fs::temp_directory_path() / fmt::format("tandem-e2e-bf16-{}", getpid());
  fs::remove_all(dir);
  testing::write_fashion_tfrecords(dir, 512);
  std::ofstream(dir / "run.yaml") << testing::fashion_config(dir,
                                                              "{global_batch_size: 32, epochs: 2, log_every_steps: 8}");
  ASSERT_EQ(testing::run_trainer(testing::train_args(dir / "run.yaml", dir / "run") + " --set precision=bf16",
                                 dir / "log.txt"),
            0)
      << testing::read_text(dir / "log.txt");
  std::ifstream log(dir / "log.txt");
  std::string first_lines, line;
  for (int i = 0; i < 6 && std::getline(log, line); ++i) first_lines += line + "\n";
  EXPECT_NE(first_lines.find("precision bf16 on the CPU"), std::string::npos) << first_lines;
  const bool fast = first_lines.find("bf16 (avx512_bf16)") != std::string::npos ||
                    first_lines.find("bf16 (amx_bf16)") != std::string::npos;
  EXPECT_EQ(!fast, first_lines.find("runs 3-4x slower than fp32") != std::string::npos) << first_lines;
  std::vector<double> loss = losses(dir / "run" / "metrics.csv");
  ASSERT_GE(loss.size(), 3u);
  EXPECT_LT(loss.back(), loss.front());
  fs::remove_all(dir);
}

TEST(TrainerEndToEnd, ConfigErrorsExitOneWithTheKeyAndLine) {
  if (!fs::exists(kTrainer)) GTEST_SKIP() << "the trainer binary is not built: " << kTrainer;
  fs::path dir = fs::temp_directory_path() / fmt::format("tandem-e2e-bad-{}", getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "bad.yaml") << "data: {files: x}\ntrain:\n  global_bach_size: 8\n";
  std::string command = fmt::format("{} --config {} --run-dir {} > {} 2>&1", kTrainer, (dir / "bad.yaml").string(),
                                    (dir / "run").string(), (dir / "log.txt").string());
  int status = std::system(command.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::stringstream log;
  log << std::ifstream(dir / "log.txt").rdbuf();
  EXPECT_NE(log.str().find("train.global_bach_size (line 3): unknown key (did you mean 'global_batch_size'?)"),
            std::string::npos)
      << log.str();

  // Config files of the wrong shape: each a one-line InvalidArgument, never yaml-cpp's Internal.
  const std::vector<std::pair<std::string, std::string>> shapes = {
      {"42\n", "expected a mapping of sections (data:, train:, model:, ...), but the file holds a single value ('42')"},
      {"[1, 2]\n", "but the file holds a list"},
      {std::string(5000, '[') + "\n", "invalid YAML: nesting too deep, or a bracket never closed"},
      {std::string("train:\n  global_batch_size: 8\0junk\n", 34), "(line 2): a NUL byte at offset 29"},
  };
  for (const auto& [text, want] : shapes) {
    std::ofstream(dir / "shape.yaml", std::ios::binary) << text;
    EXPECT_EQ(testing::run_trainer(fmt::format("--config {} --set train.epochs=2", (dir / "shape.yaml").string()),
                                   dir / "shape.txt"),
              1);
    const std::string got = testing::read_text(dir / "shape.txt");
    EXPECT_NE(got.find("error [InvalidArgument]"), std::string::npos) << got;
    EXPECT_NE(got.find(want), std::string::npos) << got;
  }

  // Missing files: the first five named and a count, however many (200,000 once made an 8 MB line).
  std::string files;
  for (int i = 0; i < 20; ++i) files += fmt::format("{}{}/missing-{}.tfrecord", i == 0 ? "" : ", ", dir.string(), i);
  std::ofstream(dir / "missing.yaml") << "data: {files: [" << files << "]}\ntrain: {global_batch_size: 8}\n";
  EXPECT_EQ(testing::run_trainer(testing::train_args(dir / "missing.yaml", dir / "run"), dir / "missing.txt"), 1);
  const std::string missing = testing::read_text(dir / "missing.txt");
  EXPECT_NE(missing.find("missing-4.tfrecord and 15 more of the 20 given"), std::string::npos) << missing;
  EXPECT_EQ(missing.find("missing-5.tfrecord"), std::string::npos) << missing;
  fs::remove_all(dir);
}

TEST(TrainerEndToEnd, AnEvaluationSetOfNoRecordsIsAnErrorBeforeTraining) {
  if (std::string reason = cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  fs::path dir = fs::temp_directory_path() / fmt::format("tandem-e2e-noeval-{}", getpid());
  fs::remove_all(dir);
  testing::write_fashion_tfrecords(dir, 64);
  std::ofstream(dir / "empty.tfrecord").close();  // a file of 0 records
  std::string yaml = testing::fashion_config(dir, "{global_batch_size: 32, epochs: 1}");
  yaml += "eval_data: {files: " + (dir / "empty.tfrecord").string() + "}\n";
  std::ofstream(dir / "run.yaml") << yaml;
  EXPECT_EQ(testing::run_trainer(testing::train_args(dir / "run.yaml", dir / "run"), dir / "log.txt"), 1);
  const std::string log = testing::read_text(dir / "log.txt");
  EXPECT_NE(log.find("the evaluation data holds 0 records"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir / "run" / "checkpoints" / "step-00000002")) << "it trained first";

  // Not counted: the first evaluation finds no examples and stops the run, its checkpoint saved.
  std::ofstream(dir / "run.yaml") << yaml.substr(0, yaml.size() - 2) << ", count_records: false}\n";
  EXPECT_EQ(testing::run_trainer(testing::train_args(dir / "run.yaml", dir / "run2"), dir / "log2.txt"), 1);
  const std::string log2 = testing::read_text(dir / "log2.txt");
  EXPECT_NE(log2.find("evaluation at step 2: eval_data yielded no examples"), std::string::npos) << log2;
  // Its eval_data has no image section: training's random crop and flip, said at start.
  EXPECT_NE(log2.find("eval_data augments its images at random (random_resized_crop, horizontal_flip)"),
            std::string::npos)
      << log2;
  EXPECT_TRUE(fs::exists(dir / "run2" / "checkpoints" / "step-00000002" / "model.safetensors")) << log2;

  // Without eval_data, `trainer eval` evaluates the training data and says so.
  std::ofstream(dir / "train_only.yaml") << testing::fashion_config(dir, "{global_batch_size: 32, epochs: 1}");
  EXPECT_EQ(testing::run_trainer(fmt::format("eval --config {} --checkpoint {}", (dir / "train_only.yaml").string(),
                                             (dir / "run2" / "checkpoints" / "step-00000002").string()),
                                 dir / "eval.txt"),
            0);
  const std::string eval = testing::read_text(dir / "eval.txt");
  EXPECT_NE(eval.find("no eval_data section, so this evaluates the training data"), std::string::npos) << eval;
  EXPECT_NE(eval.find("on 64 examples of the training data (no eval_data)"), std::string::npos) << eval;
  fs::remove_all(dir);
}

TEST(TrainerEndToEnd, AResumeWithNothingLeftKeepsTheSummaryAndRunsAMissedEvaluation) {
  if (std::string reason = cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  fs::path dir = fs::temp_directory_path() / fmt::format("tandem-e2e-rerun-{}", getpid());
  fs::remove_all(dir);
  testing::write_fashion_tfrecords(dir, 64);
  std::string yaml = testing::fashion_config(dir, "{global_batch_size: 32, epochs: 1}");
  yaml += "eval_data:\n  files: " + (dir / "tfrecords" / "train-*.tfrecord").string() +
          "\n  image: " + testing::kFashionImage + "\n";
  std::ofstream(dir / "run.yaml") << yaml;
  const std::string args = testing::train_args(dir / "run.yaml", dir / "run");
  ASSERT_EQ(testing::run_trainer(args, dir / "first.txt"), 0) << testing::read_text(dir / "first.txt");
  EXPECT_EQ(testing::read_text(dir / "first.txt").find("augments its images at random"), std::string::npos);
  const fs::path summary_path = dir / "run" / "run_summary.json";
  const nlohmann::json first = nlohmann::json::parse(std::ifstream(summary_path));
  ASSERT_TRUE(first["final_metrics"].contains("eval_top1")) << first.dump();

  // The documented requeue command on a finished run: nothing to train, and the summary stays.
  ASSERT_EQ(testing::run_trainer(args + " --set checkpoint.resume=auto", dir / "again.txt"), 0)
      << testing::read_text(dir / "again.txt");
  const nlohmann::json again = nlohmann::json::parse(std::ifstream(summary_path));
  EXPECT_EQ(again["images_per_sec"], first["images_per_sec"]);
  EXPECT_EQ(again["final_metrics"], first["final_metrics"]);
  EXPECT_EQ(testing::read_text(dir / "again.txt").find("evaluating it"), std::string::npos);

  // Killed after the last checkpoint committed, before its evaluation: the resume evaluates.
  const fs::path meta_path = dir / "run" / "checkpoints" / "step-00000002" / "meta.json";
  nlohmann::json meta = nlohmann::json::parse(std::ifstream(meta_path));
  ASSERT_EQ(meta["evaluated_step"], 2) << meta.dump();
  meta["evaluated_step"] = -1;
  meta["metrics"].erase("eval_top1");
  std::ofstream(meta_path) << meta.dump();
  fs::remove(summary_path);
  ASSERT_EQ(testing::run_trainer(args + " --set checkpoint.resume=auto", dir / "late.txt"), 0)
      << testing::read_text(dir / "late.txt");
  EXPECT_NE(testing::read_text(dir / "late.txt").find("resumed at the end of training (step 2): evaluating it"),
            std::string::npos)
      << testing::read_text(dir / "late.txt");
  const nlohmann::json late = nlohmann::json::parse(std::ifstream(summary_path));
  EXPECT_EQ(late["final_metrics"], first["final_metrics"]) << late.dump();  // the same weights, the same figures
  // That evaluation is written into the checkpoint: the next requeue has nothing left to do.
  ASSERT_EQ(testing::run_trainer(args + " --set checkpoint.resume=auto", dir / "done.txt"), 0);
  EXPECT_EQ(testing::read_text(dir / "done.txt").find("evaluating it"), std::string::npos)
      << testing::read_text(dir / "done.txt");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::tools
