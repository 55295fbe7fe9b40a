#include "tools/trainer/text_generation.h"

#include "engine/train/checkpoint/checkpoint.h"
#include "engine/train/config.h"
#include "models/registry.h"

namespace tandem::tools {

void generate_text(const TextGeneration& request, const std::function<void(char)>& on_byte) {
  const std::string where = request.checkpoint.string();
  train::CheckpointMeta meta = train::validate_checkpoint(request.checkpoint);
  train::ModelConfig spec = train::model_config_from_text(meta.config);
  TANDEM_CHECK(spec.name == "gpt", ErrorCode::kInvalidArgument,
               "generate: the checkpoint {} holds a '{}' model; generate continues text with a gpt", where, spec.name);
  TANDEM_CHECK(spec.vocab_size == 256, ErrorCode::kInvalidArgument,
               "generate: the model of {} has a vocabulary of {} tokens; the prompt and the output are bytes "
               "(vocabulary 256)",
               where, spec.vocab_size);
  TANDEM_CHECK(!request.prompt.empty(), ErrorCode::kInvalidArgument, "generate: the prompt is empty");
  auto model = std::dynamic_pointer_cast<models::Gpt>(models::create_model(spec));
  train::CheckpointManager::load(request.checkpoint, *model, nullptr);
  model->to(request.device);
  ExecutionContext ctx(request.device, 0, request.options.seed);
  ctx.bind();
  std::vector<int64_t> prompt;
  for (unsigned char c : request.prompt) prompt.push_back(c);
  models::generate(ctx, *model, prompt, request.options,
                   [&](int64_t token) { on_byte(static_cast<char>(static_cast<unsigned char>(token))); });
}

std::string generate_text(const TextGeneration& request) {
  std::string text;
  generate_text(request, [&](char c) { text.push_back(c); });
  return text;
}

}  // namespace tandem::tools
