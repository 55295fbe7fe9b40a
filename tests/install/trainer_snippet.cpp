// docs/EMBEDDING.md's Trainer snippet ("The run"), run as written: install_test.sh copies the block out
// of the doc into trainer_snippet.inc, and this program gives it the names it uses (the example's
// model, task and data from examples/custom_model, and a config as the example's) and runs it into a
// run directory that nothing but the library makes.
//   trainer_snippet SCRATCH_DIR
#include <tandem/tandem.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "text_data.h"
#include "text_model.h"
#include "text_training.h"

using namespace tandem;
using namespace text;

namespace {

class LossHistory : public train::Callback {
 public:
  explicit LossHistory(std::map<int64_t, double>& losses) : losses_(losses) {}
  void on_step_end(const train::StepReport& step, train::TrainerControl&) override {
    if (step.has_metrics) losses_[step.step] = step.scalars.get("train/loss");
  }

 private:
  std::map<int64_t, double>& losses_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path scratch = argv[1];
  const std::filesystem::path run_dir = scratch / "runs" / "snippet";  // made by the library alone
  try {
    register_text_classifier();
    const std::vector<std::string> files = write_tfrecords(scratch / "data", TextDataSpec{});
    train::TrainConfig config;
    config.seed = 11;
    config.device.device = "cpu";
    config.device.devices = "cpu:2";
    config.model = {.name = "text_classifier", .num_classes = 4, .in_channels = 1, .input_size = 12};
    config.loop.global_batch_size = 32;
    config.loop.steps = 8;
    config.loop.log_every_steps = 4;
    config.optimizer.name = "adamw";
    config.optimizer.lr = 0.01f;
    config.schedule.name = "constant";
    config.checkpoint.every_steps = 8;
    const models::ModelSpec spec{config.model.name, config.model.num_classes, config.model.in_channels,
                                 config.model.input_size, config.model.hidden};
    const int64_t batch = 16;  // per replica
    const uint64_t seed = 5;
    std::map<int64_t, double> result;
#include "trainer_snippet.inc"
    const bool ok = summary.steps == 8 && result.size() == 2 &&
                    std::filesystem::is_regular_file(run_dir / "metrics.csv") &&
                    std::filesystem::is_directory(run_dir / "checkpoints" / "step-00000008");
    std::printf("%s: the snippet trained %lld steps into %s\n", ok ? "ok" : "FAIL",
                static_cast<long long>(summary.steps), run_dir.c_str());
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
