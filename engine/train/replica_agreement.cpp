// What the replicas agree on and check between steps: the vote that ends an epoch or the run and
// fixes the step's micro-batch count, where a resumed run starts in its data and whether its batch
// source still gives the saved batches, and the NaN guard over the loss and the parameters.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "engine/train/finite_guard.h"
#include "engine/train/replica.h"

namespace tandem::train {

bool same_batches_as(const CheckpointMeta& resume, const distribute::ReplicaPlan& plan) {
  const auto& saved = resume.replicas;
  // Another global batch counts its batches in other units, even with the same replica count.
  return !saved.empty() && static_cast<int>(saved.size()) == plan.replicas() &&
         saved.front().data_position.value("global_batch", plan.global_batch_size) == plan.global_batch_size;
}

std::pair<int64_t, int64_t> ReplicaLoop::resume_position() const {
  if (!shared_.resume) return {0, 0};
  const auto& saved = shared_.resume->replicas;
  if (same_batches_as(*shared_.resume, plan_)) {
    const auto& mine = saved[static_cast<size_t>(global_rank_)].data_position;
    return {mine.value("epoch", shared_.resume->epoch), mine.value("batches", int64_t{0})};
  }
  // Another replica count or global batch: the same number of the epoch's examples is consumed, in this run's
  // order, as if the epoch had run with this many replicas from its start.
  int64_t examples = examples_into_epoch(saved.front(), plan_.global_batch_size);
  return {saved.front().data_position.value("epoch", shared_.resume->epoch), examples / plan_.global_batch_size};
}

ReplicaLoop::Vote ReplicaLoop::vote(bool have_batch, int64_t rows) {
  const std::atomic<int>* stop = shared_.setup.stop;
  const int signal = stop != nullptr ? stop->load(std::memory_order_relaxed) : 0;
  float* f = flag_.data<float>();
  const int64_t k = config_.loop.grad_accumulation_steps;
  std::fill(f + 4, f + 4 + k, 0.0f);
  // Each replica marks the micro-batch count its batch allows (fewer when a last, partial batch
  // has fewer rows than train.grad_accumulation_steps); all take the smallest marked, so every
  // replica runs the same number of forward and backward passes (SyncBatchNorm's collectives pair).
  if (have_batch) f[4 + std::clamp<int64_t>(rows, 1, k) - 1] = 1.0f;
  f[0] = have_batch ? 1.0f : 0.0f;
  f[1] = static_cast<float>(signal);
  f[2] = lead() && shared_.control.stop_requested() ? 1.0f : 0.0f;
  f[3] = lead() ? static_cast<float>(shared_.control.lr_scale()) : 0.0f;
  host_comm_->all_reduce(flag_, distribute::ReduceOp::kSum);
  // Replicas may read the flag either side of the signal: the sum is non-zero for all alike.
  if (f[1] != 0.0f && stop_signal_ == 0) stop_signal_ = signal != 0 ? signal : stop->load();
  lr_scale_ = f[3];  // replica 0's alone: the same float on every replica
  micro_batches_ = k;
  for (int64_t i = 0; i < k; ++i) {
    if (f[4 + i] != 0.0f) {
      micro_batches_ = i + 1;
      break;
    }
  }
  const bool agreed_stop = f[1] != 0.0f || f[2] != 0.0f;
  if (agreed_stop) stopped_ = true;
  return {static_cast<int>(f[0]) == plan_.replicas(), agreed_stop};
}

void ReplicaLoop::throw_no_batch(int64_t epoch, int64_t dropped) const {
  // The pipeline drops a last partial batch (data.drop_remainder) before the loop can count it.
  const std::string given =
      dropped > 0 ? fmt::format("only {} example(s) in all", dropped)
                  : fmt::format("no full batch (fewer than {} records per replica? data.drop_remainder drops a last, "
                                "partial batch)",
                                plan_.per_replica_batch_size);
  throw_error(ErrorCode::kFailedPrecondition,
              "epoch {} gave no training step: a step needs a full batch of {} example(s) on each of the {} "
              "replica(s) (train.global_batch_size {}), and the training data gave {}. Check data.files (an empty "
              "or unreadable file?), records skipped under data.on_corrupt: skip (logged above), or lower "
              "train.global_batch_size",
              epoch + 1, plan_.per_replica_batch_size, plan_.replicas(), plan_.global_batch_size, given);
}

void ReplicaLoop::check_resumed_batch(const Batch& batch, int64_t epoch, int64_t index) {
  const uint32_t now = batch_fingerprint(batch);
  TANDEM_CHECK(now == resume_fingerprint_, ErrorCode::kFailedPrecondition,
               "resume: replica {}'s batch source gives another batch {} of epoch {} than the run that wrote the "
               "checkpoint of step {} did (fingerprint {:08x}, saved {:08x}). Exact resume needs a source whose "
               "start_epoch(e) gives the same batches in the same order every time (engine/core/batch.h): seed its "
               "shuffling by the epoch and seed alone, and keep the data files as they were at the checkpoint",
               rank_, index + 1, epoch + 1, start_step_, now, resume_fingerprint_);
}

void ReplicaLoop::resume_log_interval(const CheckpointMeta& resume) {
  if (resume.interval_start < 0 || resume.interval_sums.size() != static_cast<size_t>(stats_.numel())) return;
  last_log_step_ = resume.interval_start;
  carried_examples_ = resume.interval_sums.back();
  if (global_rank_ != 0) return;  // the sums are every replica's already: one replica carries them
  std::vector<float> sums(resume.interval_sums.begin(), resume.interval_sums.end());
  stats_.copy_from(Tensor::from_vector(sums, stats_.shape()).to(ctx_->device()));
}

void ReplicaLoop::check_loss_is_finite(const Tensor& summed_stats) {
  const float* s = summed_stats.data<float>();
  const float examples = s[train_metrics_.size()];
  if (examples == 0 || std::isfinite(s[0])) return;
  const double loss = s[0] / examples;
  const std::string where = fmt::format("the training loss is {} over steps {}..{} (the log interval)", loss,
                                        last_log_step_ + 1, step_);
  const std::string why = "the run diverged or its inputs hold NaN or inf: lower optimizer.lr, clip gradients "
                          "(train.clip_grad_norm), or check the data's normalisation (data.image.mean and std)";
  if (config_.loop.on_nan_loss == "warn") {
    if (lead() && !nan_loss_warned_) spdlog::warn("{}; training on (train.on_nan_loss: warn): {}", where, why);
    nan_loss_warned_ = true;
    return;
  }
  throw_error(ErrorCode::kFailedPrecondition,
              "{}: stopped before any later checkpoint could save these weights. {}; or set train.on_nan_loss: "
              "warn to train on",
              where, why);
}

void ReplicaLoop::check_parameters_are_finite() {
  // A checkpoint at a log line's step finds the weights checked already: one pass, one read.
  if (nan_parameters_warned_ || parameters_checked_at_ == step_) return;
  parameters_checked_at_ = step_;
  const std::string name = first_nonfinite_parameter(*ctx_, *model_);
  if (name.empty()) return;
  const std::string where = fmt::format("after step {} the parameter {} holds NaN or inf, though the loss may look "
                                        "finite", step_, name);
  const std::string why = "check the data's normalisation (data.image.mean and std), lower optimizer.lr or clip "
                          "gradients (train.clip_grad_norm)";
  if (config_.loop.on_nan_loss == "warn") {
    if (lead()) spdlog::warn("{}; training on (train.on_nan_loss: warn): {}", where, why);
    nan_parameters_warned_ = true;
    return;
  }
  throw_error(ErrorCode::kFailedPrecondition,
              "{}: stopped before any later checkpoint could save these weights. {}; or set train.on_nan_loss: warn "
              "to train on", where, why);
}

}  // namespace tandem::train
