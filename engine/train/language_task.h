// Language modelling, as the `trainer` CLI runs a GPT: a batch holds "tokens", (N, T + 1) i64
// windows of a text; the model reads the first T tokens of each and is scored on predicting the
// last T (x = w[:, :-1], y = w[:, 1:], as nanoGPT's training pairs). The loss is the mean
// cross-entropy per predicted token, under the loss contract with the global batch's tokens;
// evaluation reports loss, perplexity and bits per byte (the loss in bits: tokens are bytes).
#pragma once

#include <string_view>

#include "engine/train/config.h"
#include "engine/train/task.h"

namespace tandem::train {

inline constexpr std::string_view kTokens = "tokens";

class LanguageModeling : public Task {
 public:
  // label_smoothing: the training loss's (train.label_smoothing), as PyTorch's CrossEntropyLoss
  // applies it over the vocabulary; evaluation reports the plain loss, so perplexity stays perplexity.
  explicit LanguageModeling(ModelConfig model, float label_smoothing = 0.0f);

  std::vector<std::string> train_metrics() const override { return {"loss"}; }
  std::string throughput_unit() const override { return "tok"; }  // the predicted tokens
  int64_t units_per_example(const Batch& batch) const override;  // T: a window's predicted tokens
  // bits_per_byte where the vocabulary is the 256 byte values, bits_per_token otherwise.
  std::vector<std::string> eval_metrics() const override;
  autograd::Variable train_step(TaskStep& step, nn::Module& model, const Batch& batch) override;
  int64_t eval_step(ExecutionContext& ctx, nn::Module& model, const Batch& batch, std::span<double> sums) override;
  void finish_eval(std::span<double> means) const override;
  // InvalidArgument unless tokens is (N, T + 1) i64 with T <= model.block_size.
  void check_batch(const Batch& batch, std::string_view data) const override;
  // "loss 1.2345, perplexity 3.44, bits per byte 1.781"
  std::string describe_eval(std::span<const double> means) const override;

 private:
  ModelConfig model_;
  float label_smoothing_ = 0.0f;
};

}  // namespace tandem::train
