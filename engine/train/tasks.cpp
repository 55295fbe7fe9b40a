#include "engine/train/tasks.h"

#include "engine/train/classification_task.h"
#include "engine/train/language_task.h"

namespace tandem::train {

std::shared_ptr<Task> make_task(const TrainConfig& config) {
  if (config.model.name == "gpt") return std::make_shared<LanguageModeling>(config.model, config.loop.label_smoothing);
  return std::make_shared<ImageClassification>(config.model, config.loop.label_smoothing);
}

}  // namespace tandem::train
