// The first batch checked against the model's configured input, so a loader that resizes to
// 28x64 (or reinterprets raw records as 56x14) stops with the config keys to change, instead of
// training the wrong thing silently or failing deep inside a layer.
#pragma once

#include <string_view>

#include "engine/train/batch_source.h"
#include "engine/train/config.h"

namespace tandem::train {

// InvalidArgument unless x is (N, model.in_channels, model.input_size, model.input_size) and labels
// is (N). A model.input_size or in_channels of 0 is not checked (a model that takes any size).
// `data` names where the batch came from ("training data", "evaluation data").
void check_batch_matches_model(const Batch& batch, const ModelConfig& model, std::string_view data);

}  // namespace tandem::train
