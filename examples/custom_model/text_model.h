// A text classifier that is not in models/: token ids -> nn::Embedding -> the mean over the
// sequence (MeanOverTokens, a custom op with its own backward) -> Linear -> ReLU -> Linear.
// Trained on "tokens" (N, L) i64 and "label" (N) i64 by TextClassification, a Task.
#pragma once

#include <tandem/tandem.h>

namespace text {

// (N, L, D) -> (N, D): the average of each sequence's vectors. The backward spreads dy / L over
// the L positions. CPU tensors (the Embedding before it runs on CPU replicas).
tandem::autograd::Variable mean_over_tokens(const tandem::autograd::Variable& x);

struct TextClassifierSpec {
  int64_t vocabulary = 64;
  int64_t dim = 16;
  int64_t hidden = 32;
  int64_t classes = 4;
};

class TextClassifier : public tandem::nn::Module {
 public:
  explicit TextClassifier(const TextClassifierSpec& spec);
  tandem::autograd::Variable forward(tandem::ExecutionContext& ctx, const tandem::autograd::Variable& tokens) override;

 private:
  std::shared_ptr<tandem::nn::Embedding> embedding_;
  std::shared_ptr<tandem::nn::Linear> hidden_, out_;
};

// Cross-entropy over "label" from the logits of "tokens"; metrics loss and top-1.
class TextClassification : public tandem::train::Task {
 public:
  std::vector<std::string> train_metrics() const override { return {"loss", "top1"}; }
  std::vector<std::string> eval_metrics() const override { return {"loss", "top1"}; }
  tandem::autograd::Variable train_step(tandem::train::TaskStep& step, tandem::nn::Module& model,
                                        const tandem::Batch& batch) override;
  int64_t eval_step(tandem::ExecutionContext& ctx, tandem::nn::Module& model, const tandem::Batch& batch,
                    std::span<double> sums) override;
  void check_batch(const tandem::Batch& batch, std::string_view data) const override;
};

}  // namespace text
