// Continuing a text with a GPT checkpoint whose tokens are bytes (vocabulary 256): what `trainer
// generate` prints, and the sample `trainer --config` prints after training a GPT.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "engine/core/device.h"
#include "models/gpt_generate.h"

namespace tandem::tools {

struct TextGeneration {
  std::filesystem::path checkpoint;  // a checkpoint directory (RUN/checkpoints/step-...)
  std::string prompt = "\n";
  models::GenerateOptions options;
  Device device = Device::cpu();
};

// Rebuilds the model from the config the checkpoint keeps, loads it, and passes each new byte to
// on_byte as it is sampled. InvalidArgument when the checkpoint holds no byte-level GPT or the
// prompt is empty.
void generate_text(const TextGeneration& request, const std::function<void(char)>& on_byte);

// The whole continuation as a string (after the prompt).
std::string generate_text(const TextGeneration& request);

}  // namespace tandem::tools
