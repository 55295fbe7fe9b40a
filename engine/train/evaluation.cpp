#include "engine/train/evaluation.h"

#include "engine/autograd/variable.h"

namespace tandem::train {

EvalSums evaluate_pass(ExecutionContext& ctx, nn::Module& model, BatchSource& source, Task& task) {
  bool was_training = model.is_training();
  model.eval();
  EvalSums out;
  out.sums.assign(task.eval_metrics().size(), 0.0);
  autograd::NoGradGuard no_grad;
  source.start_epoch(0);
  Batch batch;
  for (bool first = true; source.next(batch); first = false) {
    if (first) task.check_batch(batch, "evaluation data");
    out.examples += static_cast<double>(task.eval_step(ctx, model, batch, out.sums));
  }
  model.train(was_training);
  return out;
}

}  // namespace tandem::train
