// Callbacks: what a program sees of a run while it trains, and how it steers it. Every call but
// on_train_end comes from replica 0's thread, between its steps; on_train_end from the thread
// that called Trainer::run. A callback that throws fails the run like a failing step does.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/train/metrics.h"

namespace tandem::train {

// Tagged scalars in the order a run reports them ("train/loss", "gpu0/power_watts", ...).
struct Scalars {
  std::vector<std::pair<std::string, double>> values;
  void add(std::string tag, double value) { values.emplace_back(std::move(tag), value); }
  // The value of tag, or NaN when the report has none.
  double get(std::string_view tag) const;
};

struct RunInfo {
  int64_t start_step = 0;       // the resumed checkpoint's step, or 0
  int64_t total_steps = 0;      // 0 when unknown (epochs over data of unknown size)
  int64_t steps_per_epoch = 0;  // 0 when unknown
  int64_t epochs = 0;           // 0 when the run is bounded by train.steps
  int replicas = 1;
  int64_t global_batch_size = 0, per_replica_batch_size = 0;
  std::string device;  // replica 0's: "cpu", "cuda:0"
  std::filesystem::path run_dir;
};

struct StepReport {
  int64_t step = 0;  // global steps done, this one included
  int64_t epoch = 0, epochs = 0;  // epoch counts from 0; epochs 0: bounded by steps
  int64_t step_in_epoch = 0, steps_per_epoch = 0;
  double lr = 0;  // the learning rate of this step (the schedule's times the lr scale)
  // Metrics are read from the device only every train.log_every_steps (every step on CPU
  // replicas writing to a terminal): then has_metrics is true and scalars holds "train/<metric>"
  // (the means over the steps since the last report), "train/lr", "train/images_per_sec",
  // "train/input_wait_fraction" and each GPU's "gpu<i>/..." readings.
  bool has_metrics = false;
  Scalars scalars;
  double loss = 0;  // with has_metrics: the task's first train metric, the run's loss
  double images_per_sec = 0, input_wait_fraction = 0;  // images_per_sec: the task's examples per second
  std::string unit = "img";  // what those examples are (Task::throughput_unit)
  std::string devices;  // "cuda:0 util 97% mem 31.2/80.0 GiB 412 W | ..." on GPU replicas
};

struct EpochReport {
  int64_t epoch = 0;  // the epoch that ended, from 0
  int64_t steps = 0;  // trained in it by this run
  StepBreakdown times;
  int64_t dropped_examples = 0;  // left out because not every replica had a full batch
};

struct EvalReport {
  int64_t step = 0;
  int64_t examples = 0;  // over every replica's shard (a GPT's: predicted tokens)
  std::string unit = "examples";  // what `examples` counts: "examples" or "tokens"
  Scalars scalars;       // "eval/<metric>": means over the whole evaluation set
  std::string text;      // Task::describe_eval's line
};

struct CheckpointReport {
  int64_t step = 0, epoch = 0;
  std::filesystem::path path;
};

// How a callback steers the run. Requests reach every replica through the per-step vote, so all of
// them stop, or change their learning rate, after the same step.
class TrainerControl {
 public:
  // Ends the run after the current step: a checkpoint of it is saved (unless one is), and
  // RunSummary::stop_reason says why.
  void request_stop(std::string reason);
  bool stop_requested() const { return stop_requested_; }
  const std::string& stop_reason() const { return stop_reason_; }
  // Multiplies the schedule's learning rate from the next step on (1: the schedule's). Saved in
  // checkpoints, so a resumed run keeps it.
  void set_lr_scale(double scale);
  double lr_scale() const { return lr_scale_; }

 private:
  bool stop_requested_ = false;
  std::string stop_reason_;
  double lr_scale_ = 1.0;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(const RunInfo& /*run*/, TrainerControl& /*control*/) {}
  virtual void on_step_end(const StepReport& /*step*/, TrainerControl& /*control*/) {}
  virtual void on_epoch_end(const EpochReport& /*epoch*/, TrainerControl& /*control*/) {}
  virtual void on_eval_end(const EvalReport& /*eval*/, TrainerControl& /*control*/) {}
  // Before the checkpoint of `step` is written. What a callback records outside the checkpoint and a
  // run resumed from it does not write again (metrics rows up to the step) must reach the disk here:
  // a kill right after the save must not lose it.
  virtual void on_checkpoint_begin(int64_t /*step*/, TrainerControl& /*control*/) {}
  // After a checkpoint is committed (the directory of its step).
  virtual void on_checkpoint(const CheckpointReport& /*checkpoint*/, TrainerControl& /*control*/) {}
  // After a run that ended without an error (stopped early, or not).
  virtual void on_train_end(const RunSummary& /*summary*/) {}
  // State that must survive a resume (early stopping's best value and patience): a key unique among
  // the run's callbacks, and the state as text. Saved with each checkpoint, given back on resume.
  // An empty key: nothing to save.
  virtual std::string state_key() const { return {}; }
  virtual std::string save_state() const { return {}; }
  virtual void load_state(const std::string& /*state*/) {}
};

}  // namespace tandem::train
