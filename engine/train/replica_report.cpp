// What a replica reports: the step's log line and metrics (one read of the device per log line),
// the epoch's summary, and the GPUs' utilisation beside them.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>

#include "engine/train/progress.h"
#include "engine/train/replica.h"

namespace tandem::train {

void ReplicaLoop::report_epoch(int64_t epoch, int64_t steps, const StepBreakdown& times, int64_t dropped) {
  if (!lead()) return;
  shared_.summary.dropped_examples += dropped;
  EpochReport report{epoch, steps, times, dropped};
  shared_.for_each_callback([&](Callback& c) { c.on_epoch_end(report, shared_.control); });
}

void ReplicaLoop::report_step(int64_t epoch, int64_t step_in_epoch) {
  // A terminal's bar is redrawn every step on CPU replicas; on GPUs only at log steps, since each
  // redraw reads the device and samples NVML.
  bool log_now = step_ % config_.loop.log_every_steps == 0 || (shared_.setup.terminal && ctx_->device().is_cpu());
  StepReport& r = report_;
  r.has_metrics = false;
  if (log_now) {
    // The one read of the device per log line, ordered after this replica's queued steps.
    host_stats_.copy_from(stats_);
    stats_.zero_();
    host_comm_->all_reduce(host_stats_, distribute::ReduceOp::kSum);
    check_loss_is_finite(host_stats_);
    // One pass over the weights: at log lines only, not at every redraw of a terminal's bar.
    if (step_ % config_.loop.log_every_steps == 0) check_parameters_are_finite();
    last_log_step_ = step_;
  }
  if (!lead()) return;
  r.step = step_;
  r.epoch = epoch;
  r.epochs = config_.loop.steps > 0 ? 0 : config_.loop.epochs;
  r.step_in_epoch = step_in_epoch;
  r.steps_per_epoch = shared_.setup.steps_per_epoch;
  r.lr = lr_at(step_ - 1);
  r.unit = task_.throughput_unit();
  const float* s = host_stats_.data<float>();
  const size_t metrics = train_metrics_.size();
  if (log_now && s[metrics] != 0) {
    const float examples = s[metrics];  // float division, as the figures have always been
    r.has_metrics = true;
    r.scalars.values.clear();
    last_train_loss_ = s[0] / examples;
    r.loss = *last_train_loss_;
    // Examples carried from the checkpoint were timed by the run that saved it, not by this one.
    r.images_per_sec = interval_total_ > 0 ? (examples - carried_examples_) / interval_total_ : 0.0;
    r.input_wait_fraction = interval_total_ > 0 ? interval_input_ / interval_total_ : 0.0;
    r.devices = report_gpus(r.input_wait_fraction);
    for (size_t i = 0; i < metrics; ++i) r.scalars.add("train/" + train_metrics_[i], s[i] / examples);
    r.scalars.add("train/lr", r.lr);
    r.scalars.add("train/images_per_sec", r.images_per_sec);
    r.scalars.add("train/input_wait_fraction", r.input_wait_fraction);
    interval_input_ = interval_total_ = 0;
    carried_examples_ = 0;
  }
  shared_.for_each_callback([&](Callback& c) { c.on_step_end(r, shared_.control); });
}

std::string ReplicaLoop::report_gpus(double input_wait_fraction) {
  Trainer::Shared& s = shared_;
  if (!s.gpu_monitor) return {};
  s.gpu_monitor->sample_into(s.gpu_indices, s.gpu_samples);
  std::string text;
  for (size_t i = 0; i < s.gpu_samples.size(); ++i) {
    const backend::GpuSample& g = s.gpu_samples[i];
    text += (i == 0 ? "" : " | ") + backend::format_gpu_sample(g);
    std::string prefix = fmt::format("gpu{}/", g.index);
    // NVML leaves out what a board does not report (NaN): no made-up zeros in the curves.
    Scalars& out = report_.scalars;
    if (std::isfinite(g.utilization_percent)) out.add(prefix + "utilization_percent", g.utilization_percent);
    if (std::isfinite(g.memory_used_mb)) out.add(prefix + "memory_used_mb", g.memory_used_mb);
    if (std::isfinite(g.power_watts)) out.add(prefix + "power_watts", g.power_watts);
    std::string verdict = backend::gpu_idle_verdict(g.utilization_percent, input_wait_fraction);
    if (!verdict.empty() && !s.gpu_idle_warned[i]) {
      s.gpu_idle_warned[i] = 1;
      finish_progress_line();
      spdlog::warn("cuda:{} at step {}: {}", g.index, step_, verdict);
    }
  }
  return text;
}

}  // namespace tandem::train
