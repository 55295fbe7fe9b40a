// The built-in task a config trains: language modelling for model.name gpt (token windows in
// "tokens"), image classification for every other model ("image" and "label").
#pragma once

#include <memory>

#include "engine/train/config.h"
#include "engine/train/task.h"

namespace tandem::train {

std::shared_ptr<Task> make_task(const TrainConfig& config);

}  // namespace tandem::train
