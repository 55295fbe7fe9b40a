// What a run measures and reports: the step-time breakdown, step-time percentiles, the
// input-bound verdict and the summary of a run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/metrics_sink.h"

namespace tandem::train {

// Seconds spent in each phase of a step, summed over steps.
struct StepBreakdown {
  double input_wait = 0, copy = 0, forward = 0, backward = 0, all_reduce = 0, optimizer = 0;
  double total() const { return input_wait + copy + forward + backward + all_reduce + optimizer; }
  StepBreakdown& operator+=(const StepBreakdown& o);
  // "input 3.1% | copy 0.0% | forward 31.0% | ..." with per-step milliseconds.
  std::string describe(int64_t steps) const;
};

// TensorFlow's profiler thresholds on the share of step time spent waiting for input:
// under 5 % fine, 5 to 20 % moderately, over 20 % highly input-bound, with what to change.
std::string input_bound_verdict(double input_wait_fraction);

// Percentile (0 to 100) of the values, by nearest rank; 0 when empty.
double percentile(std::vector<double> values, double p);


struct RunSummary {
  // The task's units (images; a GPT's predicted tokens) / wall time after warm-up, never an average
  // of rates.
  double images_per_sec = 0;
  std::string throughput_unit = "img";  // Task::throughput_unit
  double step_time_p50_ms = 0, step_time_p95_ms = 0;
  StepBreakdown breakdown;  // replica 0's, over the timed steps
  int64_t timed_steps = 0;
  int64_t steps = 0;
  int64_t epochs = 0;
  std::map<std::string, double> final_metrics;  // train_loss, eval_loss, eval_top1, eval_top5
  int replicas = 1;   // of every process
  int processes = 1;
  // Replica 0's time in collectives across processes (Gloo), per step of this run: part of the
  // all-reduce phase, and overlapping backward where the buckets let it. 0 in a single process.
  double inter_process_ms_per_step = 0;
  int64_t global_batch_size = 0, per_replica_batch_size = 0;
  std::string device;
  int64_t dropped_examples = 0;  // examples left out because not every replica had a full batch
  double wall_time_s = 0;  // Trainer::run()'s, start to end (the trainer verb adds its set-up)
  int stop_signal = 0;  // non-zero: stopped early on request (TrainerSetup::stop), e.g. SIGTERM's 15
  std::string stop_reason;  // why a callback stopped the run early (TrainerControl::request_stop); empty otherwise
  // Resumed from a checkpoint with no step left to train: only final_metrics (the checkpoint's,
  // and an evaluation it lacked) are this run's news; the timings are not measured.
  bool resumed_at_end = false;
};

}  // namespace tandem::train
