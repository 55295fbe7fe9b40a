// `trainer export` end to end: a ResNet-20 trained on Fashion-MNIST, exported, gives under
// onnxruntime (fed from the idx files by a node script, not by Tandem's pipeline) the top-1 that
// `trainer eval` gives its checkpoint on the 10,000 test images.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "tests/support/onnxruntime.h"
#include "tests/tools/trainer_cli_test_util.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;

const std::string& kIdx = testing::kFashionIdxDir;

std::string config(const fs::path& dir) {
  return "seed: 5\ndevice: cpu\n"
         "model: {name: resnet20, num_classes: 10, in_channels: 1, input_size: 28, channels_last: true}\n"
         "data: {files: " + (dir / "train-*.tfrecord").string() + ", image: " + testing::kFashionImage + "}\n" +
         "eval_data: {files: " + (dir / "test-*.tfrecord").string() + ", shuffle_buffer: 0, image: " + testing::kFashionImage + "}\n" +
         "train: {global_batch_size: 32, steps: 200, log_every_steps: 100}\n"
         "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n";
}

std::string run_command(const std::string& command, const fs::path& out) {
  EXPECT_EQ(std::system((command + " > " + out.string() + " 2>&1").c_str()), 0) << testing::read_text(out);
  return testing::read_text(out);
}

TEST(OnnxExportCli, ResNet20OnFashionMnistHasTheSameTop1UnderOnnxruntime) {
  if (std::string reason = testing::cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  if (std::string reason = ::tandem::testing::onnxruntime_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const fs::path dir = fs::temp_directory_path() / ("tandem-onnx-e2e-" + std::to_string(getpid()));
  fs::remove_all(dir);
  testing::write_fashion_split(dir, "train", 6400, "train");
  testing::write_fashion_split(dir, "t10k", 10000, "test");
  std::ofstream(dir / "run.yaml") << config(dir);
  ASSERT_EQ(testing::run_trainer(testing::train_args(dir / "run.yaml", dir / "run"), dir / "train.txt"), 0)
      << testing::read_text(dir / "train.txt");
  const fs::path checkpoint = dir / "run" / "checkpoints" / "step-00000200";

  const std::string eval = run_command(
      testing::kTrainer + " eval --json --config " + (dir / "run.yaml").string() + " --checkpoint " + checkpoint.string(),
      dir / "eval.json");
  const nlohmann::json figures = nlohmann::json::parse(eval.substr(eval.find('{')));
  ASSERT_EQ(figures["examples"], 10000) << eval;
  const double tandem_top1 = figures["top1"];
  EXPECT_GT(tandem_top1, 0.6) << "200 steps of ResNet-20 learn Fashion-MNIST past 60%";

  const fs::path model = dir / "resnet20.onnx";
  const std::string exported = run_command(
      testing::kTrainer + " export --checkpoint " + checkpoint.string() + " --format onnx --output " + model.string(),
      dir / "export.txt");
  EXPECT_NE(exported.find("exported resnet20 (step 200)"), std::string::npos) << exported;
  EXPECT_NE(exported.find("input 'input' [batch, 1, 28, 28] NCHW"), std::string::npos) << exported;

  const std::string ort = run_command("node " + std::string(TANDEM_SOURCE_DIR) + "/tests/tools/onnx_fashion_top1.js " +
                                          model.string() + " " + kIdx + "t10k-images-idx3-ubyte.gz " + kIdx +
                                          "t10k-labels-idx1-ubyte.gz 0.286 0.353",
                                      dir / "ort.json");
  const nlohmann::json theirs = nlohmann::json::parse(ort);
  ASSERT_EQ(theirs["examples"], 10000) << ort;
  std::printf("trainer eval top-1 %.4f, onnxruntime top-1 %.4f on %d images\n", tandem_top1,
              static_cast<double>(theirs["top1"]), static_cast<int>(theirs["examples"]));
  // 0.02 points: two images of 10,000 may fall the other way on a near tie.
  EXPECT_NEAR(static_cast<double>(theirs["top1"]), tandem_top1, 0.0002) << ort << eval;
  fs::remove_all(dir);
}

TEST(OnnxExportCli, ABadCheckpointOrFormatIsRefusedWithoutAFile) {
  if (std::string reason = testing::cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const fs::path dir = fs::temp_directory_path() / ("tandem-onnx-bad-" + std::to_string(getpid()));
  fs::create_directories(dir);
  EXPECT_NE(testing::run_trainer("export --checkpoint " + (dir / "nope").string() + " --output " +
                                     (dir / "m.onnx").string(),
                                 dir / "missing.txt"),
            0);
  EXPECT_NE(testing::read_text(dir / "missing.txt").find("nope"), std::string::npos)
      << testing::read_text(dir / "missing.txt");
  EXPECT_NE(testing::run_trainer("export --checkpoint " + dir.string() + " --format tflite --output " +
                                     (dir / "m.onnx").string(),
                                 dir / "format.txt"),
            0);
  EXPECT_NE(testing::read_text(dir / "format.txt").find("tflite"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "m.onnx"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::tools
