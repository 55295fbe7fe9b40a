// What the trainer trains: a Task turns a batch of named tensors and the model into the loss to
// minimise and the metrics to report. Image classification (classification_task.h) is the built-in
// task the `trainer` CLI uses; a program brings its own for other models (docs/EMBEDDING.md).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/autograd/variable.h"
#include "engine/core/batch.h"
#include "engine/core/context.h"
#include "engine/nn/module.h"

namespace tandem::train {

// What one training step of a Task works with, on one replica.
struct TaskStep {
  ExecutionContext& ctx;
  // DESIGN.md's loss contract: a replica's loss is the sum of its per-example losses divided by
  // the global batch size (gradients are then summed across replicas).
  int64_t global_batch_size;
  // (train_metrics().size() + 1) f32 on the replica's device: the step adds each metric's sum over
  // its examples, then the number of examples (the last entry), without reading anything back.
  Tensor& sums;
  // A one-element f32 tensor holding 1 on the device, for add_to_sum's host numbers.
  const Tensor& one;
};

// sums[index] += scale * value, where value is a one-element tensor on the step's device; queued
// on the device like any op.
void add_to_sum(TaskStep& step, int index, const Tensor& value, float scale = 1.0f);
// sums[index] += value, a number known on the host (an example count, say).
void add_to_sum(TaskStep& step, int index, double value);

class Task {
 public:
  virtual ~Task() = default;
  // The metrics of a training step ("loss", "top1"): each is reported as its sum over the
  // examples since the last report divided by their number, under "train/<name>". The first is
  // the run's loss (progress lines, RunSummary::final_metrics["train_<name>"]).
  virtual std::vector<std::string> train_metrics() const = 0;
  // The metrics of an evaluation pass ("loss", "top1", "top5"), as "eval/<name>".
  virtual std::vector<std::string> eval_metrics() const = 0;
  // A training step's forward: returns this replica's loss under the loss contract and adds the
  // step's metric sums and example count to step.sums.
  virtual autograd::Variable train_step(TaskStep& step, nn::Module& model, const Batch& batch) = 0;
  // One evaluation batch, gradients off and the model in eval mode: adds each metric's sum over the
  // batch to sums (eval_metrics().size() entries) and returns the number of examples.
  virtual int64_t eval_step(ExecutionContext& ctx, nn::Module& model, const Batch& batch, std::span<double> sums) = 0;
  // The first batch of the training data (data = "training data") and of each evaluation pass
  // ("evaluation data"): throws InvalidArgument saying what to change when it is not what the
  // model takes. The default accepts anything.
  virtual void check_batch(const Batch& batch, std::string_view data) const;
  // Metrics that are functions of others' means (perplexity = exp(mean loss)) are filled in here,
  // after the sums over every replica are divided: eval_step leaves their sums at 0.
  virtual void finish_eval(std::span<double> means) const;
  // What the progress line's rate counts (the examples of train_step's count): "img", "tok".
  virtual std::string throughput_unit() const { return "img"; }
  // How many of those units one example of this batch is (1 image; T predicted tokens per window).
  virtual int64_t units_per_example(const Batch& batch) const;
  // The text of an evaluation's log line from its means, in eval_metrics() order:
  // "loss 0.4012, top1 0.8512" by default.
  virtual std::string describe_eval(std::span<const double> means) const;
};

}  // namespace tandem::train
