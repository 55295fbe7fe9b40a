// A program's own model in the `trainer` command line: registered by name, then trained by
// trainer_main (tandem/cli.h) from a YAML config that names it, as an embedding program does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "engine/core/error.h"
#include "engine/nn/layers.h"
#include "include/tandem/cli.h"
#include "models/registry.h"
#include "tests/tools/trainer_cli_test_util.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;

int call_trainer(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return trainer_main(static_cast<int>(argv.size()), argv.data());
}

TEST(RegisteredModelCli, TrainerMainTrainsAModelTheProgramRegistered) {
  if (std::string reason = testing::cli_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  static std::atomic<int> built{0};  // the registry outlives the test: nothing of its stack
  static const bool registered = [] {
    models::register_model("flat_linear", [](const models::ModelSpec& spec) {
      ++built;  // once per replica
      auto net = std::make_shared<nn::Sequential>();
      net->push_back(std::make_shared<nn::Flatten>());
      net->push_back(std::make_shared<nn::Linear>(spec.in_channels * spec.input_size * spec.input_size, spec.num_classes));
      return net;
    });
    return true;
  }();
  ASSERT_TRUE(registered);
  built = 0;
  fs::path dir = fs::temp_directory_path() / fmt::format("tandem-registered-{}", getpid());
  fs::remove_all(dir);
  testing::write_fashion_tfrecords(dir, 256);
  std::string config = testing::fashion_config(dir, "{global_batch_size: 32, epochs: 1, log_every_steps: 4}");
  const std::string from = "name: small_cnn";
  config.replace(config.find(from), from.size(), "name: flat_linear");
  config.replace(config.find("channels_last: true"), std::string("channels_last: true").size(), "channels_last: false");
  std::ofstream(dir / "run.yaml") << config;
  ASSERT_EQ(call_trainer({"trainer", "--config", (dir / "run.yaml").string(), "--run-dir", (dir / "run").string(),
                          "--set", "devices=cpu:2"}),
            0);
  EXPECT_EQ(built, 2);
  EXPECT_TRUE(fs::exists(dir / "run" / "checkpoints" / "step-00000008" / "model.safetensors"));
  // An unknown name lists the registered one beside the built-in models.
  config.replace(config.find("name: flat_linear"), std::string("name: flat_linear").size(), "name: flat_linaer");
  std::ofstream(dir / "bad.yaml") << config;
  EXPECT_EQ(call_trainer({"trainer", "--config", (dir / "bad.yaml").string(), "--run-dir", (dir / "bad").string()}), 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::tools
