// Accuracy helpers of the training loop.
#pragma once

#include <cstdint>

#include "engine/core/context.h"
#include "engine/core/tensor.h"
#include "engine/nn/module.h"
#include "engine/train/batch_source.h"
#include "engine/train/config.h"

namespace tandem::train {

// Sums over an evaluation pass: divide by `examples` for the means.
struct EvalSums {
  double loss = 0, top1 = 0, top5 = 0, examples = 0;
};

// One pass over source (its epoch 0) in eval mode without gradients; the model is left in
// training mode afterwards when it was in it before.
// With `expect`, the first batch is checked against the model's configured input (batch_check.h).
EvalSums evaluate_pass(ExecutionContext& ctx, nn::Module& model, BatchSource& source, float label_smoothing,
                       const ModelConfig* expect = nullptr);

// (N, K) logits, (N) i64 labels: how many rows have their label among the k largest logits.
int64_t count_top_k(const Tensor& logits, const Tensor& labels, int k);

}  // namespace tandem::train
