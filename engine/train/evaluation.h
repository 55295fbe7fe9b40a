// One evaluation pass of a task over a batch source: what the trainer runs on each replica's
// shard, and `trainer eval` on a checkpoint.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/batch.h"
#include "engine/core/context.h"
#include "engine/nn/module.h"
#include "engine/train/task.h"

namespace tandem::train {

// Sums over an evaluation pass: divide by `examples` for the means.
struct EvalSums {
  std::vector<double> sums;  // one per task.eval_metrics()
  double examples = 0;
};

// One pass over source (its epoch 0) in eval mode without gradients; the model is left in
// training mode afterwards when it was in it before. The first batch goes through
// task.check_batch(batch, "evaluation data").
EvalSums evaluate_pass(ExecutionContext& ctx, nn::Module& model, BatchSource& source, Task& task);

}  // namespace tandem::train
