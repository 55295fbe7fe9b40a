#include "engine/train/classification_task.h"

#include <cmath>

#include <fmt/format.h>

#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"
#include "engine/core/error.h"

namespace tandem::train {

ImageClassification::ImageClassification(ModelConfig model, float label_smoothing)
    : model_(std::move(model)), label_smoothing_(label_smoothing) {}

autograd::Variable ImageClassification::train_step(TaskStep& step, nn::Module& model, const Batch& batch) {
  const Tensor& labels = batch.at(kLabel);
  autograd::Variable logits = model.forward(step.ctx, autograd::Variable(batch.at(kImage)));
  autograd::Variable loss =
      autograd::cross_entropy_loss(step.ctx, logits, labels, label_smoothing_, step.global_batch_size);
  // The loss is this replica's share of the global mean; scaled back to a sum of example losses.
  backend::accumulate_classification_stats(step.ctx, loss.value(), static_cast<float>(step.global_batch_size),
                                           logits.value(), labels, step.sums);
  return loss;
}

int64_t ImageClassification::eval_step(ExecutionContext& ctx, nn::Module& model, const Batch& batch,
                                       std::span<double> sums) {
  const Tensor& labels = batch.at(kLabel);
  autograd::Variable logits = model.forward(ctx, autograd::Variable(batch.at(kImage)));
  autograd::Variable per_example = autograd::softmax_cross_entropy(ctx, logits, labels, label_smoothing_);
  for (float v : per_example.value().to_vector()) sums[0] += v;
  sums[1] += static_cast<double>(count_top_k(logits.value(), labels, 1));
  sums[2] += static_cast<double>(count_top_k(logits.value(), labels, 5));
  return labels.numel();
}

void ImageClassification::check_batch(const Batch& batch, std::string_view data) const {
  const Tensor* image = batch.find(kImage);
  TANDEM_CHECK(image != nullptr && image->defined() && image->rank() == 4, ErrorCode::kInvalidArgument,
               "the {} gives batches of {}, but model '{}' takes (N, C, H, W) images named '{}'", data,
               batch.empty() ? std::string("nothing") : batch.describe(), model_.name, kImage);
  const Tensor& x = *image;
  const bool channels_ok = model_.in_channels <= 0 || x.dim(1) == model_.in_channels;
  const bool size_ok = model_.input_size <= 0 || (x.dim(2) == model_.input_size && x.dim(3) == model_.input_size);
  TANDEM_CHECK(channels_ok && size_ok, ErrorCode::kInvalidArgument,
               "the {} gives images of {} channel(s) x {} x {} (batch {}), but the model is configured for "
               "model.in_channels {} and model.input_size {} ({} x {} x {}): make data.image (height, width, "
               "channels, or raw_shape for raw records) produce that, or change model.input_size and "
               "model.in_channels to match the data",
               data, x.dim(1), x.dim(2), x.dim(3), x.shape().str(), model_.in_channels, model_.input_size,
               model_.in_channels, model_.input_size, model_.input_size);
  const Tensor* labels = batch.find(kLabel);
  TANDEM_CHECK(labels != nullptr && labels->defined() && labels->rank() == 1 && labels->dim(0) == x.dim(0),
               ErrorCode::kInvalidArgument, "the {} gives {} label(s) ({}) for a batch of {} image(s) ({})", data,
               labels != nullptr && labels->defined() ? labels->numel() : 0,
               labels != nullptr && labels->defined() ? labels->shape().str() : std::string("none"), x.dim(0),
               x.shape().str());
}

std::string ImageClassification::describe_eval(std::span<const double> m) const {
  return fmt::format("loss {:.4f}, top-1 {:.2f}%, top-5 {:.2f}%", m[0], 100 * m[1], 100 * m[2]);
}

int64_t count_top_k(const Tensor& logits, const Tensor& labels, int k) {
  Tensor host_logits = logits.to(Device::cpu());
  Tensor host_labels = labels.to(Device::cpu());
  const float* z = host_logits.data<float>();
  const int64_t* y = host_labels.data<int64_t>();
  int64_t n = logits.dim(0), classes = logits.dim(1), correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = z + i * classes;
    float target = row[y[i]];
    // The label is in the top k when fewer than k logits beat it (ties count for the label); a row
    // with a NaN is never correct, whatever k.
    int64_t better = 0;
    bool nan = false;
    for (int64_t j = 0; j < classes; ++j) {
      better += row[j] > target;
      nan = nan || std::isnan(row[j]);
    }
    correct += better < k && !nan;
  }
  return correct;
}

}  // namespace tandem::train
