// One replica's training loop: set up (model on its device, optimizer, bucketer, broadcast
// of replica 0's weights, resume), then epochs of steps in lockstep with the other replicas.
#include <spdlog/spdlog.h>

#include <chrono>

#include "engine/autograd/ops.h"
#include "engine/distribute/replica_sync.h"
#include "engine/distribute/sync_batchnorm.h"
#include "engine/nn/init.h"
#include "engine/train/evaluation.h"
#include "engine/train/replica.h"

namespace tandem::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

distribute::BucketOptions bucket_options(const DistributeConfig& d) {
  distribute::BucketOptions o;
  o.first_bucket_bytes = static_cast<size_t>(d.first_bucket_mb * (1 << 20));
  o.bucket_bytes = static_cast<size_t>(d.bucket_cap_mb * (1 << 20));
  o.op = distribute::ReduceOp::kSum;  // the loss is already divided by the global batch
  return o;
}

}  // namespace

ReplicaLoop::ReplicaLoop(Trainer::Shared& shared, int rank)
    : shared_(shared), config_(shared.setup.config), plan_(shared.setup.plan), rank_(rank) {}

void ReplicaLoop::setup() {
  Device device = plan_.devices[static_cast<size_t>(rank_)];
  ctx_ = std::make_unique<ExecutionContext>(device, plan_.threads_per_replica);
  ctx_->generator() = Generator::for_replica(config_.seed, 0, rank_);
  nn::init::manual_seed(config_.seed);  // per thread: every replica draws the same initial weights
  model_ = shared_.setup.make_model();
  model_->to(device);
  model_->train();
  optimizer_ = optim::make_optimizer(model_->named_parameters(), config_.optimizer);
  comm_ = &shared_.group->communicator(rank_);
  if (shared_.resume) {
    auto path = shared_.checkpoints->path_for_step(shared_.resume->step);
    CheckpointManager::load(path, *model_, optimizer_.get());
    const auto& saved = shared_.resume->replicas;
    // A replica the checkpoint did not have (resumed with more replicas) keeps its fresh stream.
    if (rank_ < static_cast<int>(saved.size())) ctx_->generator().set_state(saved[static_cast<size_t>(rank_)].rng);
    step_ = start_step_ = shared_.resume->step;
  }
  if (config_.distribute.sync_batchnorm && plan_.replicas() > 1) {
    int layers = distribute::convert_sync_batchnorm(*model_, *comm_);
    if (rank_ == 0) {
      spdlog::info("sync_batchnorm: {} BatchNorm layer(s) take their statistics over the global batch of {} replicas",
                   layers, plan_.replicas());
    }
  }
  // Running statistics are equal across replicas only when they come from the same batch.
  buffers_identical_ = plan_.replicas() == 1 || config_.distribute.sync_batchnorm;
  distribute::broadcast_parameters(*comm_, *model_);
  bucketer_ = std::make_unique<distribute::GradientBucketer>(*comm_, *ctx_, model_->named_parameters(),
                                                             bucket_options(config_.distribute));
  flag_ = Tensor::zeros({1}, DType::kF32, device);
  stats_ = Tensor::zeros({3}, DType::kF32, device);
}

bool ReplicaLoop::done() const { return config_.loop.steps > 0 && step_ >= config_.loop.steps; }

void ReplicaLoop::run() {
  setup();
  auto [first_epoch, skip] = resume_position();
  int64_t last_epoch = config_.loop.steps > 0 ? INT64_MAX : config_.loop.epochs;
  int64_t epoch = first_epoch;
  for (; epoch < last_epoch && !done(); ++epoch) {
    auto [batches, completed] = train_epoch(epoch, skip);
    skip = 0;
    if (!completed) {
      // Stopped by train.steps mid-epoch: evaluate and save where the data stands.
      if (config_.loop.eval_every_steps == 0) evaluate(step_);
      checkpoint(epoch, batches);
      break;
    }
    if (config_.loop.eval_every_steps == 0) evaluate(step_);
    if (config_.checkpoint.every_steps == 0 || done()) checkpoint(epoch + 1, 0);
  }
  if (rank_ == 0) {
    RunSummary& s = shared_.summary;
    s.steps = step_;
    s.epochs = epoch;
    s.timed_steps = timed_steps_;
    s.breakdown = timed_breakdown_;
    s.images_per_sec = timed_seconds_ > 0
                           ? static_cast<double>(timed_steps_ * plan_.global_batch_size) / timed_seconds_
                           : 0.0;
    s.step_time_p50_ms = 1000.0 * percentile(step_times_, 50);
    s.step_time_p95_ms = 1000.0 * percentile(step_times_, 95);
    s.final_metrics["train_loss"] = last_train_loss_;
    s.replicas = plan_.replicas();
    s.global_batch_size = plan_.global_batch_size;
    s.per_replica_batch_size = plan_.per_replica_batch_size;
    s.device = plan_.devices.front().str();
  }
}

std::pair<int64_t, int64_t> ReplicaLoop::resume_position() const {
  if (!shared_.resume) return {0, 0};
  const auto& saved = shared_.resume->replicas;
  if (static_cast<int>(saved.size()) == plan_.replicas()) {
    const auto& mine = saved[static_cast<size_t>(rank_)].data_position;
    return {mine.value("epoch", shared_.resume->epoch), mine.value("batches", int64_t{0})};
  }
  // Another replica count: the same number of the epoch's examples is consumed, in this run's
  // order, as if the epoch had run with this many replicas from its start.
  int64_t examples = examples_into_epoch(saved.front(), plan_.global_batch_size);
  return {saved.front().data_position.value("epoch", shared_.resume->epoch), examples / plan_.global_batch_size};
}

bool ReplicaLoop::all_have_batch(bool mine) {
  flag_.data<float>()[0] = mine ? 1.0f : 0.0f;
  comm_->all_reduce(flag_, distribute::ReduceOp::kSum);
  return static_cast<int>(flag_.data<float>()[0]) == plan_.replicas();
}

std::pair<int64_t, bool> ReplicaLoop::train_epoch(int64_t epoch, int64_t skip_batches) {
  BatchSource& source = *shared_.setup.train_sources[static_cast<size_t>(rank_)];
  source.start_epoch(epoch);
  Batch batch;
  int64_t batches = 0;
  for (; batches < skip_batches && source.next(batch); ++batches) {
  }
  StepBreakdown epoch_times;
  int64_t epoch_steps = 0;
  bool completed = false;
  while (!done()) {
    auto start = Clock::now();
    double copy_before = source.copy_seconds();
    bool have = source.next(batch);
    StepBreakdown times;
    times.copy = source.copy_seconds() - copy_before;
    times.input_wait = seconds_since(start) - times.copy;
    comm_->set_step(step_);
    if (!all_have_batch(have)) {
      // Not every replica has a full batch: the epoch ends here for all of them.
      if (have) dropped_ += batch.labels.numel();
      int64_t rest = 0;
      while (source.next(batch)) rest += batch.labels.numel();
      dropped_ += rest;
      completed = true;
      break;
    }
    train_step(batch, times);
    double step_seconds = seconds_since(start);
    ++step_;
    ++batches;
    ++epoch_steps;
    epoch_times += times;
    interval_input_ += times.input_wait;
    interval_total_ += step_seconds;
    if (step_ > start_step_ + config_.loop.warmup_steps_for_timing) {
      ++timed_steps_;
      timed_seconds_ += step_seconds;
      timed_breakdown_ += times;
      step_times_.push_back(step_seconds);
    }
    log_step(epoch, batches);
    if (config_.distribute.checksum_every_steps > 0 && step_ % config_.distribute.checksum_every_steps == 0) {
      distribute::verify_parameters(*comm_, *model_, buffers_identical_);
    }
    if (config_.loop.eval_every_steps > 0 && (step_ % config_.loop.eval_every_steps == 0 || done())) {
      evaluate(step_);
    }
    if (config_.checkpoint.every_steps > 0 && step_ % config_.checkpoint.every_steps == 0) {
      checkpoint(epoch, batches);
    }
  }
  int64_t dropped_total = static_cast<int64_t>(reduce_scalar_sum(static_cast<double>(dropped_)));
  dropped_ = 0;
  if (rank_ == 0) {
    shared_.progress.finish_line();
    shared_.summary.dropped_examples += dropped_total;
    spdlog::info("epoch {} done: {} steps; step time: {}", epoch + 1, epoch_steps, epoch_times.describe(epoch_steps));
    spdlog::info("epoch {} input pipeline: {}", epoch + 1,
                 input_bound_verdict(epoch_times.total() > 0 ? epoch_times.input_wait / epoch_times.total() : 0.0));
    if (dropped_total > 0) {
      spdlog::info("epoch {}: {} examples dropped because not every replica had a full batch", epoch + 1,
                   dropped_total);
    }
  }
  return {batches, completed};
}

void ReplicaLoop::train_step(const Batch& batch, StepBreakdown& times) {
  float lr = shared_.schedule->lr_at(step_);
  optimizer_->set_lr(lr);
  optimizer_->zero_grad();  // gradients accumulate across backward calls otherwise
  auto t = Clock::now();
  autograd::Variable logits = model_->forward(*ctx_, autograd::Variable(batch.x));
  autograd::Variable loss = autograd::cross_entropy_loss(*ctx_, logits, batch.labels, config_.loop.label_smoothing,
                                                         plan_.global_batch_size);
  times.forward = seconds_since(t);
  t = Clock::now();
  loss.backward(ctx_.get());
  times.backward = seconds_since(t);
  reduce_and_update(times);
  // The loss is this replica's share of the global mean; scale back to a sum of example losses.
  loss_sum_ += static_cast<double>(loss.value().to_vector()[0]) * static_cast<double>(plan_.global_batch_size);
  correct_ += static_cast<double>(count_top_k(logits.value(), batch.labels, 1));
  seen_ += static_cast<double>(batch.labels.numel());
}

void ReplicaLoop::reduce_and_update(StepBreakdown& times) {
  auto t = Clock::now();
  if (config_.loop.clip_grad_norm > 0) {
    // Clipping needs the norm of every gradient: wait for all buckets, then update.
    bucketer_->finish();
    times.all_reduce = seconds_since(t);
    t = Clock::now();
    optim::clip_grad_norm(*ctx_, model_->named_parameters(), config_.loop.clip_grad_norm);
    optimizer_->step(*ctx_);
    times.optimizer = seconds_since(t);
    return;
  }
  // Each bucket's parameters are updated as soon as it is reduced, while later buckets are still
  // in flight; the time spent updating is taken out of the all-reduce wait.
  double updating = 0;
  bucketer_->finish([&](const std::vector<int>& params) {
    auto u = Clock::now();
    optimizer_->update_params(*ctx_, params);
    updating += seconds_since(u);
  });
  optimizer_->finish_step();
  times.all_reduce = seconds_since(t) - updating;
  times.optimizer = updating;
}

double ReplicaLoop::reduce_scalar_sum(double value) {
  flag_.data<float>()[0] = static_cast<float>(value);
  comm_->all_reduce(flag_, distribute::ReduceOp::kSum);
  return flag_.data<float>()[0];
}

void ReplicaLoop::log_step(int64_t epoch, int64_t step_in_epoch) {
  bool log_now = step_ % config_.loop.log_every_steps == 0 || shared_.setup.terminal;
  if (!log_now) return;
  float* s = stats_.data<float>();
  s[0] = static_cast<float>(loss_sum_);
  s[1] = static_cast<float>(correct_);
  s[2] = static_cast<float>(seen_);
  comm_->all_reduce(stats_, distribute::ReduceOp::kSum);
  loss_sum_ = correct_ = seen_ = 0;
  if (rank_ != 0 || s[2] == 0) return;
  last_train_loss_ = s[0] / s[2];
  double images_per_sec = interval_total_ > 0 ? s[2] / interval_total_ : 0.0;
  ProgressLine line{epoch, config_.loop.steps > 0 ? 0 : config_.loop.epochs, step_in_epoch,
                    shared_.setup.steps_per_epoch, step_, images_per_sec, last_train_loss_,
                    shared_.schedule->lr_at(step_ - 1), interval_total_ > 0 ? interval_input_ / interval_total_ : 0.0};
  shared_.progress.update(line);
  for (MetricsSink* sink : shared_.setup.sinks) {
    sink->scalar("train/loss", last_train_loss_, step_);
    sink->scalar("train/top1", s[1] / s[2], step_);
    sink->scalar("train/lr", line.lr, step_);
    sink->scalar("train/images_per_sec", images_per_sec, step_);
    sink->scalar("train/input_wait_fraction", line.input_wait_fraction, step_);
  }
  interval_input_ = interval_total_ = 0;
}

}  // namespace tandem::train
