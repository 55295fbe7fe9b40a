// Evaluation and checkpoints of one replica: every replica evaluates its own shard and the
// counts are summed across replicas; replica 0 writes checkpoints with every replica's position.
#include "engine/train/evaluation.h"

#include <spdlog/spdlog.h>

#include "engine/autograd/ops.h"
#include "engine/distribute/replica_sync.h"
#include "engine/train/batch_check.h"
#include "engine/train/replica.h"

namespace tandem::train {

int64_t count_top_k(const Tensor& logits, const Tensor& labels, int k) {
  Tensor host_logits = logits.to(Device::cpu());
  Tensor host_labels = labels.to(Device::cpu());
  const float* z = host_logits.data<float>();
  const int64_t* y = host_labels.data<int64_t>();
  int64_t n = logits.dim(0), classes = logits.dim(1), correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = z + i * classes;
    float target = row[y[i]];
    // The label is in the top k when fewer than k logits beat it (ties count for the label).
    int64_t better = 0;
    for (int64_t j = 0; j < classes; ++j) better += row[j] > target;
    correct += better < k;
  }
  return correct;
}

EvalSums evaluate_pass(ExecutionContext& ctx, nn::Module& model, BatchSource& source, float label_smoothing,
                       const ModelConfig* expect) {
  bool was_training = model.is_training();
  model.eval();
  EvalSums sums;
  autograd::NoGradGuard no_grad;
  source.start_epoch(0);
  Batch batch;
  for (bool first = true; source.next(batch); first = false) {
    if (first && expect != nullptr) check_batch_matches_model(batch, *expect, "evaluation data");
    autograd::Variable logits = model.forward(ctx, autograd::Variable(batch.x));
    autograd::Variable per_example = autograd::softmax_cross_entropy(ctx, logits, batch.labels, label_smoothing);
    for (float v : per_example.value().to_vector()) sums.loss += v;
    sums.top1 += static_cast<double>(count_top_k(logits.value(), batch.labels, 1));
    sums.top5 += static_cast<double>(count_top_k(logits.value(), batch.labels, 5));
    sums.examples += static_cast<double>(batch.labels.numel());
  }
  model.train(was_training);
  return sums;
}

void ReplicaLoop::evaluate(int64_t step) {
  auto& sources = shared_.setup.eval_sources;
  if (sources.empty()) return;
  EvalSums mine = evaluate_pass(*ctx_, *model_, *sources[static_cast<size_t>(rank_)], config_.loop.label_smoothing,
                                &config_.model);
  double loss = mine.loss, top1 = mine.top1, top5 = mine.top5, count = mine.examples;
  // Each replica evaluated a different shard; the sums over replicas are the whole set's.
  Tensor sums = Tensor::from_vector({static_cast<float>(loss), static_cast<float>(top1), static_cast<float>(top5),
                                     static_cast<float>(count)},
                                    {4})
                    .to(ctx_->device());
  comm_->all_reduce(sums, distribute::ReduceOp::kSum);
  std::vector<float> s = sums.to_vector();
  if (rank_ != 0 || s[3] == 0) return;
  auto& metrics = shared_.summary.final_metrics;
  metrics["eval_loss"] = s[0] / s[3];
  metrics["eval_top1"] = s[1] / s[3];
  metrics["eval_top5"] = s[2] / s[3];
  shared_.progress.finish_line();
  spdlog::info("eval at step {}: loss {:.4f}, top-1 {:.2f}%, top-5 {:.2f}% on {} examples", step, metrics["eval_loss"],
               100 * metrics["eval_top1"], 100 * metrics["eval_top5"], static_cast<int64_t>(s[3]));
  for (MetricsSink* sink : shared_.setup.sinks) {
    sink->scalar("eval/loss", metrics["eval_loss"], step);
    sink->scalar("eval/top1", metrics["eval_top1"], step);
    sink->scalar("eval/top5", metrics["eval_top5"], step);
  }
}

void ReplicaLoop::checkpoint(int64_t epoch, int64_t batches_into_epoch) {
  if (last_checkpoint_step_ == step_) return;  // the same state is saved already
  last_checkpoint_step_ = step_;
  ReplicaState& mine = shared_.positions[static_cast<size_t>(rank_)];
  // batches: this replica's batches into the epoch (equal on every replica: they step together);
  // with the global batch they give the global position a run with another replica count resumes from.
  mine.data_position = {{"epoch", epoch}, {"batches", batches_into_epoch}, {"global_batch", plan_.global_batch_size}};
  mine.rng = ctx_->generator().state();
  // The checksum is a collective, so it also orders every replica's position write before the save.
  distribute::verify_parameters(*comm_, *model_, buffers_identical_);
  if (rank_ == 0) {
    CheckpointMeta meta;
    meta.step = step_;
    meta.epoch = epoch;
    meta.replicas = shared_.positions;
    meta.config = shared_.setup.resolved_config;
    meta.metrics = shared_.summary.final_metrics;
    meta.metrics["train_loss"] = last_train_loss_;
    shared_.progress.finish_line();
    shared_.checkpoints->save(*model_, *optimizer_, meta);  // logs where it went
    // Metrics up to the checkpoint reach the disk with it: a kill from here on loses only rows a
    // resumed run writes again.
    for (MetricsSink* sink : shared_.setup.sinks) sink->flush();
  }
  // No replica may write its next position before replica 0 has copied them all.
  reduce_scalar_sum(0.0);
}

}  // namespace tandem::train
