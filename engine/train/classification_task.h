// The built-in task: image classification, as the `trainer` CLI runs it. A batch holds "image"
// (N, C, H, W) f32 in the model's memory format and "label" (N) i64; the loss is softmax cross
// entropy (with label smoothing); metrics are loss and top-1 in training, loss, top-1 and top-5
// in evaluation.
#pragma once

#include <string_view>

#include "engine/train/config.h"
#include "engine/train/task.h"

namespace tandem::train {

inline constexpr std::string_view kImage = "image";
inline constexpr std::string_view kLabel = "label";

class ImageClassification : public Task {
 public:
  // model: its in_channels and input_size are what the first batch is checked against (0: any).
  ImageClassification(ModelConfig model, float label_smoothing);

  std::vector<std::string> train_metrics() const override { return {"loss", "top1"}; }
  std::vector<std::string> eval_metrics() const override { return {"loss", "top1", "top5"}; }
  autograd::Variable train_step(TaskStep& step, nn::Module& model, const Batch& batch) override;
  int64_t eval_step(ExecutionContext& ctx, nn::Module& model, const Batch& batch, std::span<double> sums) override;
  // InvalidArgument unless image is (N, model.in_channels, model.input_size, model.input_size) and
  // label is (N), naming the config keys to change.
  void check_batch(const Batch& batch, std::string_view data) const override;
  // "loss 0.4012, top-1 85.12%, top-5 99.01%"
  std::string describe_eval(std::span<const double> means) const override;

 private:
  ModelConfig model_;
  float label_smoothing_;
};

// (N, K) logits, (N) i64 labels: how many rows have their label among the k largest logits.
int64_t count_top_k(const Tensor& logits, const Tensor& labels, int k);

}  // namespace tandem::train
