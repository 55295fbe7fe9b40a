// One replica's training loop: set up (model on its device, optimizer, bucketer, broadcast
// of replica 0's weights, resume), then epochs of steps in lockstep with the other replicas.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string_view>

#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"
#include "engine/distribute/replica_sync.h"
#include "engine/distribute/sync_batchnorm.h"
#include "engine/nn/init.h"
#include "engine/train/evaluation.h"
#include "engine/train/progress.h"
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
  o.wire_dtype = d.allreduce_dtype == "bf16" ? DType::kBF16 : DType::kF32;
  return o;
}

}  // namespace

ReplicaLoop::ReplicaLoop(Trainer::Shared& shared, int rank)
    : shared_(shared), config_(shared.setup.config), plan_(shared.setup.plan), rank_(rank),
      global_rank_(shared.setup.plan.first_replica() + rank), task_(*shared.setup.task) {}

void ReplicaLoop::setup() {
  Device device = plan_.devices[static_cast<size_t>(rank_)];
  ctx_ = std::make_unique<ExecutionContext>(device, plan_.threads_per_replica, 0, kernel_options(config_));
  ctx_->bind();  // this thread's device, and the stream its implicit copies and allocations follow
  ctx_->generator() = Generator::for_replica(config_.seed, 0, global_rank_);
  shared_.setup.train_sources[static_cast<size_t>(rank_)]->bind(*ctx_);
  if (!shared_.setup.eval_sources.empty()) shared_.setup.eval_sources[static_cast<size_t>(rank_)]->bind(*ctx_);
  nn::init::manual_seed(config_.seed);  // per thread: every replica draws the same initial weights
  model_ = shared_.setup.make_model();
  model_->to(device);
  model_->train();
  optimizer_ = optim::make_optimizer(model_->named_parameters(), config_.optimizer);
  comm_ = &shared_.device_communicator(rank_);
  host_comm_ = &shared_.group->communicator(rank_);
  if (shared_.resume) {
    CheckpointManager::load(shared_.resume_path, *model_, optimizer_.get());
    const auto& saved = shared_.resume->replicas;
    // A replica the checkpoint did not have (resumed with more replicas) keeps its fresh stream.
    if (global_rank_ < static_cast<int>(saved.size())) {
      ctx_->generator().set_state(saved[static_cast<size_t>(global_rank_)].rng);
    }
    step_ = start_step_ = last_log_step_ = shared_.resume->step;
    last_eval_step_ = shared_.resume->evaluated_step;
    // The figures so far stay the run's until new ones replace them: a run resumed at its end
    // reports its evaluation, not nothing.
    if (lead()) shared_.summary.final_metrics = shared_.resume->metrics;
    lr_scale_ = static_cast<float>(shared_.resume->lr_scale);
    if (same_batches_as(*shared_.resume, plan_)) {
      const nlohmann::json& position = saved[static_cast<size_t>(global_rank_)].data_position;
      resume_fingerprint_of_ = position.value("fingerprint_of", std::string());
      resume_fingerprint_ = position.value("fingerprint", uint32_t{0});
    }
  }
  if (config_.distribute.sync_batchnorm && plan_.replicas() > 1) {
    int layers = distribute::convert_sync_batchnorm(*model_, *comm_);
    if (lead()) {
      spdlog::info("sync_batchnorm: {} BatchNorm layer(s) take their statistics over the global batch of {} replicas",
                   layers, plan_.replicas());
    }
  }
  // Running statistics are equal across replicas only when they come from the same batch.
  buffers_identical_ = plan_.replicas() == 1 || config_.distribute.sync_batchnorm;
  distribute::broadcast_parameters(*comm_, *model_);
  if (shared_.resume && static_cast<int>(shared_.resume->replicas.size()) == plan_.replicas()) {
    // Per-replica running statistics come back to the replica that gathered them (after the
    // broadcast, which gave every replica replica 0's), so evaluations match the run that saved.
    CheckpointManager::load_replica_buffers(shared_.resume_path, global_rank_, *model_);
  }
  if (plan_.replicas() > 1) {  // one replica's gradients are already the step's: nothing to reduce
    bucketer_ = std::make_unique<distribute::GradientBucketer>(*comm_, *ctx_, model_->named_parameters(),
                                                               bucket_options(config_.distribute));
  }
  timer_ = std::make_unique<StepTimer>(*ctx_);
  // The vote's four flags, then one slot per micro-batch count (see vote()).
  flag_ = Tensor::zeros({4 + config_.loop.grad_accumulation_steps}, DType::kF32);
  train_metrics_ = task_.train_metrics();
  TANDEM_CHECK(!train_metrics_.empty(), ErrorCode::kInvalidArgument, "task: train_metrics() names no metric; the "
               "first is the run's loss");
  const int64_t sums = static_cast<int64_t>(train_metrics_.size()) + 1;
  stats_ = Tensor::zeros({sums}, DType::kF32, device);
  host_stats_ = Tensor::zeros({sums}, DType::kF32);
  one_ = Tensor::from_vector({1.0f}, Shape{}).to(device);
  if (shared_.resume) resume_log_interval(*shared_.resume);
}

bool ReplicaLoop::done() const { return stopped_ || (config_.loop.steps > 0 && step_ >= config_.loop.steps); }

void ReplicaLoop::run() {
  try {
    run_epochs();
  } catch (const Error& e) {
    // Stop the others before this loop's members are destroyed: their destructors wait for queued
    // device work, which may wait for a collective the others would otherwise never finish.
    shared_.abort(fmt::format("replica {} failed: {}", global_rank_, e.what()));
    if (e.code() != ErrorCode::kResourceExhausted || ctx_ == nullptr || ctx_->device().is_cpu()) throw;
    throw Error(e.code(), fmt::format("replica {}: {}; {}", global_rank_, e.what(), out_of_memory_advice()));
  } catch (const std::exception& e) {
    shared_.abort(fmt::format("replica {} failed: {}", global_rank_, e.what()));
    throw;
  }
}

std::string ReplicaLoop::out_of_memory_advice() const {
  AllocatorStats s = ctx_->allocator().stats();
  int64_t batch = plan_.per_replica_batch_size;
  if (s.oom_bytes_asked <= 0 || s.oom_bytes_in_use <= 0) {
    return fmt::format("the per-replica batch size is {}: lower it, or set precision: bf16", batch);
  }
  // What the step held when it failed fitted; it needed at least the request more. Activations grow
  // about linearly with the batch (weights and optimizer state do not), so this is an upper
  // estimate of a batch that fits, rounded down to a multiple of 8.
  double fits = static_cast<double>(batch) * static_cast<double>(s.oom_bytes_in_use) /
                static_cast<double>(s.oom_bytes_in_use + s.oom_bytes_asked);
  int64_t suggestion = std::max<int64_t>(1, static_cast<int64_t>(fits) / 8 * 8);
  if (suggestion >= batch) suggestion = std::max<int64_t>(1, batch / 2);
  return fmt::format("with per-replica batch size {} the step held {:.2f} GiB and asked for {:.2f} GiB more; "
                     "try per_replica_batch_size: {} or fewer, or precision: bf16",
                     batch, static_cast<double>(s.oom_bytes_in_use) / (1 << 30),
                     static_cast<double>(s.oom_bytes_asked) / (1 << 30), suggestion);
}

void ReplicaLoop::run_epochs() {
  setup();
  if (lead()) {
    RunInfo run{start_step_, shared_.total_steps(), shared_.setup.steps_per_epoch,
                config_.loop.steps > 0 ? 0 : config_.loop.epochs, plan_.replicas(), plan_.global_batch_size,
                plan_.per_replica_batch_size, plan_.devices.front().str(), shared_.setup.run_dir};
    shared_.for_each_callback([&](Callback& c) { c.on_train_begin(run, shared_.control); });
  }
  auto [first_epoch, skip] = resume_position();
  int64_t last_epoch = config_.loop.steps > 0 ? INT64_MAX : config_.loop.epochs;
  int64_t epoch = first_epoch;
  for (; epoch < last_epoch && !done(); ++epoch) {
    EpochEnd end = train_epoch(epoch, skip);
    if (end.completed && end.steps == 0 && skip == 0) throw_no_batch(epoch, end.dropped);
    skip = 0;
    // The checkpoint comes first: an evaluation that fails (a bad label in eval_data) must not
    // lose the epoch's training.
    if (!end.completed) {
      // Stopped mid-epoch (train.steps, or a stop request): save where the data stands, then
      // evaluate, unless asked to stop (a signal wants the process gone soon; a callback has seen
      // enough).
      if (!stopped_ || step_ > start_step_) checkpoint(epoch, end.batches, nullptr, end.next);
      if (config_.loop.eval_every_steps == 0 && !stopped_) evaluate(step_);
      break;
    }
    // Every epoch's end without checkpoint.every_steps; with it, the run's end (the last epoch, or
    // train.steps reached), whose last steps no periodic save may have caught.
    const bool last_epoch_done = epoch + 1 == last_epoch;
    if (config_.checkpoint.every_steps == 0 || done() || last_epoch_done) checkpoint(epoch + 1, 0);
    if (config_.loop.eval_every_steps == 0) evaluate(step_);
  }
  // Resumed with nothing left to train (killed after the last checkpoint, before its evaluation;
  // or a finished run started again): what is left is the evaluation of the last step, if it did not run.
  const int64_t every = config_.loop.eval_every_steps;
  const bool ends_with_eval = every == 0 || config_.loop.steps > 0 || step_ % every == 0;
  if (shared_.resume && step_ == start_step_ && !stopped_ && last_eval_step_ != step_ && ends_with_eval &&
      !shared_.setup.eval_sources.empty()) {
    if (lead()) {
      spdlog::info("resumed at the end of training (step {}): evaluating it, as the interrupted run had left to do",
                   step_);
    }
    // The run's own checkpoint of this step then records the evaluation (as a save before an
    // evaluation does), so the next resume does not evaluate again; another run's is left alone.
    std::error_code ec;
    if (std::filesystem::equivalent(shared_.resume_path, shared_.checkpoints->path_for_step(step_), ec)) {
      last_checkpoint_step_ = step_;
    }
    evaluate(step_);
  }
  if (rank_ == 0) {
    RunSummary& s = shared_.summary;
    s.steps = step_;
    s.epochs = epoch;
    s.timed_steps = timed_steps_;
    s.breakdown = timed_breakdown_;
    s.images_per_sec =
        timed_seconds_ > 0
            ? static_cast<double>(timed_steps_ * plan_.global_batch_size * units_per_example_) / timed_seconds_
            : 0.0;
    s.throughput_unit = task_.throughput_unit();
    s.step_time_p50_ms = 1000.0 * percentile(step_times_, 50);
    s.step_time_p95_ms = 1000.0 * percentile(step_times_, 95);
    if (last_train_loss_) s.final_metrics["train_" + train_metrics_.front()] = *last_train_loss_;
    s.replicas = plan_.replicas();
    s.processes = plan_.processes;
    if (plan_.processes > 1 && step_ > start_step_) {
      s.inter_process_ms_per_step = 1000.0 * shared_.group->communicator(rank_).across_seconds() /
                                    static_cast<double>(step_ - start_step_);
    }
    s.global_batch_size = plan_.global_batch_size;
    s.per_replica_batch_size = plan_.per_replica_batch_size;
    s.device = plan_.devices.front().str();
    s.stop_signal = stop_signal_;
    if (stopped_ && stop_signal_ == 0) s.stop_reason = shared_.control.stop_reason();
    s.resumed_at_end = shared_.resume.has_value() && step_ == start_step_ && !stopped_;
  }
}

ReplicaLoop::EpochEnd ReplicaLoop::train_epoch(int64_t epoch, int64_t skip_batches) {
  BatchSource& source = *shared_.setup.train_sources[static_cast<size_t>(rank_)];
  source.start_epoch(epoch);
  Batch batch;
  int64_t batches = 0;
  for (; batches < skip_batches && source.next(batch); ++batches) {
  }
  if (skip_batches > 0 && batches == skip_batches && resume_fingerprint_of_ == "last") {
    check_resumed_batch(batch, epoch, batches - 1);
  }
  StepBreakdown epoch_times;
  std::optional<uint32_t> next;
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
    host_comm_->set_step(step_);
    if (have && !input_checked_) {
      task_.check_batch(batch, "training data");
      units_per_example_ = task_.units_per_example(batch);
      input_checked_ = true;
    }
    if (have && resume_fingerprint_of_ == "next") check_resumed_batch(batch, epoch, batches);
    resume_fingerprint_of_.clear();  // only the first batch of a resumed run is checked
    const Vote agreed = vote(have, have ? batch.size() : 0);
    if (agreed.stop) {
      // The fetched batch is not trained: a resumed run reads it again, and checks it is the same.
      if (have) next = batch_fingerprint(batch);
      break;
    }
    if (!agreed.all_have_batch) {
      // Not every replica has a full batch: the epoch ends here for all of them.
      if (have) dropped_ += batch.size();
      int64_t rest = 0;
      while (source.next(batch)) rest += batch.size();
      dropped_ += rest;
      completed = true;
      break;
    }
    train_step(batch);
    ++step_;
    // step_done waits (if at all) for the step `lag` behind: on a GPU that is where the host meets
    // the device's pace, so the step's wall time is read after it.
    add_phases(timer_->step_done(step_), epoch_times);
    double step_seconds = seconds_since(start);
    ++batches;
    ++epoch_steps;
    epoch_times += times;
    interval_input_ += times.input_wait;
    interval_total_ += step_seconds;
    if (timed(step_)) {
      ++timed_steps_;
      timed_seconds_ += step_seconds;
      timed_breakdown_ += times;
      step_times_.push_back(step_seconds);
    }
    report_step(epoch, batches);
    if (config_.distribute.checksum_every_steps > 0 && step_ % config_.distribute.checksum_every_steps == 0) {
      distribute::verify_parameters(*comm_, *model_, buffers_identical_);
    }
    // The run's last step is saved here too, before its evaluation (which may fail).
    if ((config_.checkpoint.every_steps > 0 && step_ % config_.checkpoint.every_steps == 0) || done()) {
      checkpoint(epoch, batches, &batch);
    }
    if (config_.loop.eval_every_steps > 0 && (step_ % config_.loop.eval_every_steps == 0 || done())) {
      evaluate(step_);
    }
  }
  add_phases(timer_->drain(), epoch_times);
  int64_t dropped_total = static_cast<int64_t>(reduce_scalar_sum(static_cast<double>(dropped_)));
  dropped_ = 0;
  report_epoch(epoch, epoch_steps, epoch_times, dropped_total);
  return {batches, completed, epoch_steps, dropped_total, next};
}

bool ReplicaLoop::timed(int64_t step) const { return step > start_step_ + config_.loop.warmup_steps_for_timing; }

void ReplicaLoop::add_phases(const std::vector<std::pair<int64_t, DevicePhases>>& steps, StepBreakdown& epoch) {
  for (const auto& [step, p] : steps) {
    StepBreakdown b;
    b.forward = p.forward;
    b.backward = p.backward;
    b.all_reduce = p.all_reduce;
    b.optimizer = p.optimizer;
    epoch += b;
    if (timed(step)) timed_breakdown_ += b;
  }
}

float ReplicaLoop::lr_at(int64_t step) const {
  float lr = shared_.schedule->lr_at(step);
  return lr_scale_ == 1.0f ? lr : lr * lr_scale_;
}

void ReplicaLoop::train_step(const Batch& batch) {
  optimizer_->set_lr(lr_at(step_));
  optimizer_->zero_grad();  // gradients accumulate across backward calls otherwise
  timer_->start();
  // The task sums its metrics on the device: nothing is read back until a log line needs it.
  TaskStep step{*ctx_, plan_.global_batch_size, stats_, one_};
  // train.grad_accumulation_steps: micro-batches whose gradients add up in the parameters, only the
  // last backward reducing them (DDP's no_sync). Each micro-batch's loss keeps the global batch as
  // its divisor, so the sum over micro-batches and replicas is the global batch's mean.
  // A last, partial batch (data.drop_remainder: false) may have fewer rows than micro-batches: the
  // replicas agreed (vote()) on a count every one's rows allow, so none is empty and none is dropped.
  const int64_t micro_batches = micro_batches_;
  for (int64_t m = 0; m < micro_batches; ++m) {
    const bool last = m + 1 == micro_batches;
    if (bucketer_) bucketer_->set_reducing(last);
    autograd::Variable loss =
        task_.train_step(step, *model_, micro_batches == 1 ? batch : micro_batch(batch, m, micro_batches));
    if (last) timer_->forward_done();  // earlier micro-batches' backward counts as forward time
    loss.backward(ctx_.get());
  }
  timer_->backward_done();
  reduce_and_update();
}

Batch ReplicaLoop::micro_batch(const Batch& batch, int64_t index, int64_t count) const {
  // Every tensor of the batch leads with the examples, in either layout: micro-batch `index` of
  // `count` is a view of rows [index * n / count, (index + 1) * n / count), so every row is in one
  // (a partial last batch need not divide). The batch stays alive for the step.
  Batch out;
  for (const auto& [name, t] : batch.tensors()) {
    const int64_t n = t.dim(0);
    const int64_t begin = index * n / count, rows = (index + 1) * n / count - begin;
    Shape shape = t.shape();
    shape[0] = rows;
    const size_t row_bytes = n > 0 ? t.nbytes() / static_cast<size_t>(n) : 0;
    void* start = static_cast<char*>(t.raw_data()) + static_cast<size_t>(begin) * row_bytes;
    out.set(name, Tensor::borrow(start, shape, t.dtype(), t.device(), t.format()));
  }
  return out;
}

void ReplicaLoop::reduce_and_update() {
  // The timer measures how long the replica's stream (the host, on the CPU) waits for each bucket:
  // the all-reduce time that backward did not hide. The rest, up to the step's end, is the optimizer.
  auto on_wait = [this](bool begins) { begins ? timer_->wait_begins() : timer_->wait_ends(); };
  if (!bucketer_) {
    fill_missing_gradients();
    const double max_norm = config_.loop.clip_grad_norm;
    if (max_norm > 0) optim::clip_grad_norm(*ctx_, model_->named_parameters(), max_norm);
    optimizer_->step(*ctx_);
    return;
  }
  if (config_.loop.clip_grad_norm > 0) {
    // Clipping needs the norm of every gradient: wait for all buckets, then update.
    bucketer_->finish({}, on_wait);
    optim::clip_grad_norm(*ctx_, model_->named_parameters(), config_.loop.clip_grad_norm);
    optimizer_->step(*ctx_);
    return;
  }
  // Each bucket's parameters are updated as soon as it is reduced, while later buckets are still
  // in flight.
  bucketer_->finish([&](const std::vector<int>& params) { optimizer_->update_params(*ctx_, params); }, on_wait);
  optimizer_->finish_step();
}

void ReplicaLoop::fill_missing_gradients() {
  // As the bucketer does with several replicas: a parameter no gradient reached gets zeros (so one
  // replica trains as several would), named once.
  std::string named;
  for (auto& [name, p] : model_->named_parameters()) {
    if (p.has_grad()) continue;
    p.set_grad(Tensor::zeros(p.value().shape(), DType::kF32, ctx_->device(), p.value().format()));
    if (warned_no_grad_.insert(name).second) named += fmt::format("{}{}", named.empty() ? "" : ", ", name);
  }
  if (!named.empty() && lead()) {
    spdlog::warn("no gradient at step {} for {}: zero gradients are used (said once per parameter; freeze a "
                 "parameter that is meant to be unused with requires_grad false)",
                 step_, named);
  }
}

double ReplicaLoop::reduce_scalar_sum(double value) {
  flag_.data<float>()[0] = static_cast<float>(value);
  host_comm_->all_reduce(flag_, distribute::ReduceOp::kSum);
  return flag_.data<float>()[0];
}

void ReplicaLoop::evaluate(int64_t step) {
  auto& sources = shared_.setup.eval_sources;
  if (sources.empty()) return;
  EvalSums mine = evaluate_pass(*ctx_, *model_, *sources[static_cast<size_t>(rank_)], task_);
  // Each replica evaluated a different shard; the sums over replicas are the whole set's.
  std::vector<float> values;
  for (double v : mine.sums) values.push_back(static_cast<float>(v));
  values.push_back(static_cast<float>(mine.examples));
  Tensor sums = Tensor::from_vector(values, {static_cast<int64_t>(values.size())}).to(ctx_->device());
  comm_->all_reduce(sums, distribute::ReduceOp::kSum);
  std::vector<float> s = sums.to_vector();
  const float examples = s.back();
  // Every replica holds the same sum, so all of them stop here together (no collective is left waiting).
  TANDEM_CHECK(examples > 0, ErrorCode::kFailedPrecondition,
               "evaluation at step {}: eval_data yielded no examples on any replica (the checkpoint of this step, "
               "if one was due, is saved): point eval_data.files at the evaluation records, or remove the "
               "eval_data section to train without evaluation",
               step);
  last_eval_step_ = step;
  if (!lead()) return;
  const std::vector<std::string> names = task_.eval_metrics();
  EvalReport report;
  report.step = step;
  report.examples = static_cast<int64_t>(examples);
  if (task_.throughput_unit() == "tok") report.unit = "tokens";
  std::vector<double> means;
  for (size_t i = 0; i < names.size(); ++i) means.push_back(s[i] / examples);
  task_.finish_eval(means);
  for (size_t i = 0; i < names.size(); ++i) {
    shared_.summary.final_metrics["eval_" + names[i]] = means[i];
    report.scalars.add("eval/" + names[i], means[i]);
  }
  report.text = task_.describe_eval(means);
  finish_progress_line();
  shared_.for_each_callback([&](Callback& c) { c.on_eval_end(report, shared_.control); });
  if (last_checkpoint_step_ == step) {
    // The checkpoint of this step came first (an evaluation that fails must not lose the training):
    // it gets what the evaluation changed, so a run resumed from it does not differ.
    CheckpointMeta meta;
    fill_run_state(meta);
    update_checkpoint_meta(shared_.checkpoints->path_for_step(step), meta);
  }
}

void ReplicaLoop::fill_run_state(CheckpointMeta& meta) const {
  meta.metrics = shared_.summary.final_metrics;
  meta.evaluated_step = last_eval_step_;
  if (last_train_loss_) meta.metrics["train_" + train_metrics_.front()] = *last_train_loss_;
  meta.lr_scale = shared_.control.lr_scale();
  for (const auto& callback : shared_.setup.callbacks) {
    if (!callback->state_key().empty()) meta.callbacks[callback->state_key()] = callback->save_state();
  }
}

void ReplicaLoop::checkpoint(int64_t epoch, int64_t batches_into_epoch, const Batch* last_trained,
                             std::optional<uint32_t> next_fingerprint) {
  if (last_checkpoint_step_ == step_) return;  // the same state is saved already
  // The running sums of the log interval under way, read and left in place: no checkpoint holds
  // weights trained on a NaN loss (on_nan_loss: fail), and a resumed run's first log row averages
  // the same steps as an uninterrupted run's.
  Tensor peek = Tensor::empty(host_stats_.shape());
  peek.copy_from(stats_);
  host_comm_->all_reduce(peek, distribute::ReduceOp::kSum);
  if (config_.loop.on_nan_loss == "fail") {
    check_loss_is_finite(peek);
    check_parameters_are_finite();
  }
  interval_sums_.clear();
  for (float v : peek.to_vector()) interval_sums_.push_back(v);
  last_checkpoint_step_ = step_;
  ReplicaState& mine = shared_.positions[static_cast<size_t>(rank_)];
  // batches: this replica's batches into the epoch (equal on every replica: they step together);
  // with the global batch they give the global position a run with another replica count resumes from.
  mine.data_position = {{"epoch", epoch}, {"batches", batches_into_epoch}, {"global_batch", plan_.global_batch_size}};
  if (last_trained != nullptr && batches_into_epoch > 0) {
    mine.data_position["fingerprint_of"] = "last";
    mine.data_position["fingerprint"] = batch_fingerprint(*last_trained);
  } else if (next_fingerprint) {
    mine.data_position["fingerprint_of"] = "next";
    mine.data_position["fingerprint"] = *next_fingerprint;
  }
  mine.rng = ctx_->generator().state();
  // The checksum is a collective, so it also orders every replica's position write before the save.
  distribute::verify_parameters(*comm_, *model_, buffers_identical_);
  std::vector<ReplicaState> positions = all_positions();
  TensorMap replica_buffers = gather_replica_buffers();
  if (lead()) {
    CheckpointMeta meta;
    meta.step = step_;
    meta.epoch = epoch;
    meta.replicas = std::move(positions);
    meta.config = shared_.setup.resolved_config;
    if (std::all_of(interval_sums_.begin(), interval_sums_.end(), [](double v) { return std::isfinite(v); })) {
      meta.interval_start = last_log_step_;
      meta.interval_sums = interval_sums_;
    }
    fill_run_state(meta);
    finish_progress_line();
    // MetricsWriter flushes here: metrics up to this step are on disk before the checkpoint exists,
    // so a kill at any point loses only rows of steps after the checkpoint a resumed run starts from.
    shared_.for_each_callback([&](Callback& c) { c.on_checkpoint_begin(step_, shared_.control); });
    CheckpointReport report{step_, epoch, shared_.checkpoints->save(*model_, *optimizer_, meta, replica_buffers)};
    shared_.for_each_callback([&](Callback& c) { c.on_checkpoint(report, shared_.control); });
  }
  // No replica may write its next position before replica 0 has copied them all.
  reduce_scalar_sum(0.0);
}

TensorMap ReplicaLoop::gather_replica_buffers() {
  if (buffers_identical_) return {};
  // Every replica's f32 buffers in one flat vector, gathered once over all replicas (of every
  // process); replica 0 names the others' pieces. Only at checkpoints.
  std::vector<std::pair<std::string, Tensor*>> buffers;
  int64_t total = 0;
  for (auto& [name, buffer] : model_->named_buffers()) {
    if (buffer->dtype() != DType::kF32) continue;  // counters advance alike on every replica
    buffers.emplace_back(name, buffer);
    total += buffer->numel();
  }
  if (total == 0) return {};
  Tensor mine = Tensor::empty({total});
  int64_t at = 0;
  for (auto& [name, buffer] : buffers) {
    const std::vector<float> values = buffer->to(Device::cpu()).to_vector();
    std::copy(values.begin(), values.end(), mine.data<float>() + at);
    at += buffer->numel();
  }
  const int world = plan_.replicas();
  Tensor all = Tensor::empty({total * world});
  host_comm_->all_gather(mine, all);
  TensorMap out;
  if (!lead()) return out;
  for (int r = 1; r < world; ++r) {
    at = static_cast<int64_t>(r) * total;
    for (auto& [name, buffer] : buffers) {
      Tensor t = Tensor::empty(buffer->shape());
      std::copy_n(all.data<float>() + at, buffer->numel(), t.data<float>());
      out[fmt::format("replica{}.{}", r, name)] = t;
      at += buffer->numel();
    }
  }
  return out;
}

std::vector<ReplicaState> ReplicaLoop::all_positions() {
  if (plan_.processes == 1) return lead() ? shared_.positions : std::vector<ReplicaState>();
  // Two all-gathers over every replica: the lengths of their positions as JSON, then the texts
  // padded to the longest. Only at checkpoints, so the allocations do not matter.
  const std::string mine = replica_state_to_json(shared_.positions[static_cast<size_t>(rank_)]).dump();
  const int world = plan_.replicas();
  Tensor lengths = Tensor::zeros({world}, DType::kF32);
  host_comm_->all_gather(Tensor::from_vector({static_cast<float>(mine.size())}, Shape{1}), lengths);
  const std::vector<float> sizes = lengths.to_vector();
  const auto longest = static_cast<int64_t>(*std::max_element(sizes.begin(), sizes.end()));
  Tensor text = Tensor::zeros({longest}, DType::kU8);
  std::memcpy(text.raw_data(), mine.data(), mine.size());
  Tensor texts = Tensor::zeros({world * longest}, DType::kU8);
  host_comm_->all_gather(text, texts);
  std::vector<ReplicaState> out;
  const auto* bytes = static_cast<const char*>(texts.raw_data());
  for (int r = 0; r < world; ++r) {
    std::string_view json(bytes + static_cast<size_t>(r) * static_cast<size_t>(longest),
                          static_cast<size_t>(sizes[static_cast<size_t>(r)]));
    out.push_back(replica_state_from_json(nlohmann::json::parse(json), fmt::format("replica {}'s position", r)));
  }
  return out;
}

}  // namespace tandem::train
