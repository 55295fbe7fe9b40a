// Training the text classifier with the engine's Trainer: mirrored replicas on cpu:N, the
// model by its registered name, TFRecord sources, checkpoints and resume, callbacks.
#pragma once

#include <tandem/tandem.h>

#include <filesystem>

#include "text_data.h"

namespace text {

struct TrainOptions {
  std::filesystem::path data_dir, run_dir;
  int replicas = 2;
  int64_t global_batch = 32;
  int64_t epochs = 4;
  int64_t steps = 0;   // > 0: stop after this many steps (a resumed run continues to epochs)
  bool resume = false;  // continue from the newest checkpoint in run_dir/checkpoints
  bool log = true;      // the engine's progress lines
};

struct TrainResult {
  tandem::train::RunSummary summary;
  int64_t start_step = 0;                // where the run began (a resumed checkpoint's step)
  std::map<int64_t, double> losses;      // train/loss at each logged step
  std::vector<std::shared_ptr<tandem::nn::Module>> replicas;  // every replica's model at the end
};

// Registers "text_classifier" with the model registry (once), so configs can name it.
void register_text_classifier();

TrainResult train_text_classifier(const TrainOptions& options);

}  // namespace text
