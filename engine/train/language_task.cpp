#include "engine/train/language_task.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"
#include "engine/core/error.h"
#include "engine/nn/linear_head.h"

namespace tandem::train {
namespace {

struct Pairs {
  Tensor inputs, targets;  // (N, T) each
};

Pairs split_windows(ExecutionContext& ctx, const Tensor& tokens) {
  const int64_t t = tokens.dim(1) - 1;
  return {backend::narrow(ctx, tokens, 1, 0, t), backend::narrow(ctx, tokens, 1, 1, t)};
}

// The model's logits and cross-entropy, fused where the model ends in a linear head (GPT): the
// (tokens, vocabulary) logits never exist whole.
autograd::Variable token_loss(ExecutionContext& ctx, nn::Module& model, const Pairs& p, float label_smoothing,
                              int64_t divisor) {
  return nn::model_cross_entropy_loss(ctx, model, autograd::Variable(p.inputs), p.targets, label_smoothing, divisor);
}

}  // namespace

LanguageModeling::LanguageModeling(ModelConfig model, float label_smoothing)
    : model_(std::move(model)), label_smoothing_(label_smoothing) {}

std::vector<std::string> LanguageModeling::eval_metrics() const {
  return {"loss", "perplexity", model_.vocab_size == 256 ? "bits_per_byte" : "bits_per_token"};
}

autograd::Variable LanguageModeling::train_step(TaskStep& step, nn::Module& model, const Batch& batch) {
  Pairs p = split_windows(step.ctx, batch.at(kTokens));
  const int64_t tokens = p.targets.numel();
  // The loss contract: the sum of this replica's token losses over the global batch's tokens.
  const int64_t global_tokens = step.global_batch_size * p.targets.dim(1);
  autograd::Variable loss = token_loss(step.ctx, model, p, label_smoothing_, global_tokens);
  add_to_sum(step, 0, loss.value(), static_cast<float>(global_tokens));
  add_to_sum(step, 1, static_cast<double>(tokens));
  return loss;
}

int64_t LanguageModeling::eval_step(ExecutionContext& ctx, nn::Module& model, const Batch& batch,
                                    std::span<double> sums) {
  Pairs p = split_windows(ctx, batch.at(kTokens));
  autograd::NoGradGuard no_grad;
  const Tensor total = token_loss(ctx, model, p, 0.0f, 1).value().to(Device::cpu());  // the sum of the losses
  sums[0] += total.to_vector()[0];
  return p.targets.numel();
}

void LanguageModeling::finish_eval(std::span<double> means) const {
  means[1] = std::exp(means[0]);
  means[2] = means[0] / std::numbers::ln2;
}

int64_t LanguageModeling::units_per_example(const Batch& batch) const { return batch.at(kTokens).dim(1) - 1; }

void LanguageModeling::check_batch(const Batch& batch, std::string_view data) const {
  const Tensor* tokens = batch.find(kTokens);
  TANDEM_CHECK(tokens != nullptr && tokens->defined() && tokens->rank() == 2 && tokens->dtype() == DType::kI64,
               ErrorCode::kInvalidArgument,
               "the {} gives batches of {}, but model '{}' takes (N, T + 1) i64 token windows named '{}' (a "
               "data.tokens section)",
               data, batch.empty() ? std::string("nothing") : batch.describe(), model_.name, kTokens);
  const int64_t t = tokens->dim(1) - 1;
  TANDEM_CHECK(t >= 1 && t <= model_.block_size, ErrorCode::kInvalidArgument,
               "the {} gives windows of {} tokens ({} predicted), but model.block_size is {}: make data.tokens.length "
               "at most block_size + 1 ({}) and at least 2",
               data, tokens->dim(1), t, model_.block_size, model_.block_size + 1);
}

std::string LanguageModeling::describe_eval(std::span<const double> means) const {
  return fmt::format("loss {:.4f}, perplexity {:.3f}, {} {:.4f}", means[0], means[1],
                     model_.vocab_size == 256 ? "bits per byte" : "bits per token", means[2]);
}

}  // namespace tandem::train
