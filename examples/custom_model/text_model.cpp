#include "text_model.h"

namespace text {

using tandem::Tensor;
using tandem::autograd::Variable;

Variable mean_over_tokens(const Variable& x) {
  const Tensor& in = x.value();
  TANDEM_CHECK(in.rank() == 3 && in.device().is_cpu(), tandem::ErrorCode::kInvalidArgument,
               "mean_over_tokens: takes (N, L, D) on the CPU, not {}", in.describe());
  const int64_t n = in.dim(0), length = in.dim(1), d = in.dim(2);
  Tensor y = Tensor::zeros({n, d});
  const float* src = in.data<float>();
  float* out = y.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t t = 0; t < length; ++t) {
      for (int64_t j = 0; j < d; ++j) out[i * d + j] += src[(i * length + t) * d + j];
    }
    for (int64_t j = 0; j < d; ++j) out[i * d + j] /= static_cast<float>(length);
  }
  return tandem::autograd::make_op("mean_over_tokens", y, {x}, [n, length, d](const Tensor& dy) {
    Tensor dx = Tensor::empty({n, length, d});
    const float* g = dy.data<float>();
    float* out_grad = dx.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t t = 0; t < length; ++t) {
        for (int64_t j = 0; j < d; ++j) out_grad[(i * length + t) * d + j] = g[i * d + j] / static_cast<float>(length);
      }
    }
    return std::vector<Tensor>{dx};
  });
}

TextClassifier::TextClassifier(const TextClassifierSpec& spec) {
  embedding_ = register_module("embedding", std::make_shared<tandem::nn::Embedding>(spec.vocabulary, spec.dim));
  hidden_ = register_module("hidden", std::make_shared<tandem::nn::Linear>(spec.dim, spec.hidden));
  out_ = register_module("out", std::make_shared<tandem::nn::Linear>(spec.hidden, spec.classes));
}

Variable TextClassifier::forward(tandem::ExecutionContext& ctx, const Variable& tokens) {
  Variable pooled = mean_over_tokens(embedding_->forward(ctx, tokens));
  return out_->forward(ctx, tandem::autograd::relu(ctx, hidden_->forward(ctx, pooled)));
}

Variable TextClassification::train_step(tandem::train::TaskStep& step, tandem::nn::Module& model,
                                        const tandem::Batch& batch) {
  const Tensor& labels = batch.at("label");
  Variable logits = model.forward(step.ctx, Variable(batch.at("tokens")));
  Variable loss = tandem::autograd::cross_entropy_loss(step.ctx, logits, labels, 0.0f, step.global_batch_size);
  // Sums on the device (here the CPU), read by the trainer only at log lines.
  tandem::backend::accumulate_classification_stats(step.ctx, loss.value(), static_cast<float>(step.global_batch_size),
                                                   logits.value(), labels, step.sums);
  return loss;
}

int64_t TextClassification::eval_step(tandem::ExecutionContext& ctx, tandem::nn::Module& model,
                                      const tandem::Batch& batch, std::span<double> sums) {
  const Tensor& labels = batch.at("label");
  Variable logits = model.forward(ctx, Variable(batch.at("tokens")));
  Variable per_example = tandem::autograd::softmax_cross_entropy(ctx, logits, labels, 0.0f);
  for (float v : per_example.value().to_vector()) sums[0] += v;
  sums[1] += static_cast<double>(tandem::train::count_top_k(logits.value(), labels, 1));
  return labels.numel();
}

void TextClassification::check_batch(const tandem::Batch& batch, std::string_view data) const {
  const Tensor& tokens = batch.at("tokens");
  TANDEM_CHECK(tokens.rank() == 2 && tokens.dtype() == tandem::DType::kI64, tandem::ErrorCode::kInvalidArgument,
               "the {} gives tokens {}; the text classifier takes (N, L) i64 token ids", data, tokens.describe());
}

}  // namespace text
