// The callbacks a run usually wants: metric writers, the log lines, early stopping and
// learning-rate control on a plateau. The `trainer` CLI installs MetricsWriter (metrics.csv and
// TensorBoard) and ProgressLogger; a program picks its own.
#pragma once

#include <functional>
#include <memory>

#include "engine/core/metrics_sink.h"
#include "engine/train/callback.h"
#include "engine/train/progress.h"

namespace tandem::train {

// Writes every reported scalar (train, eval, GPU readings) to a MetricsSink: at a run's start it
// drops what the sink holds past the start step (MetricsSink::resume_at); it flushes before each
// checkpoint is written, so metrics up to a checkpoint are on disk before it exists, and at the end.
class MetricsWriter : public Callback {
 public:
  explicit MetricsWriter(std::shared_ptr<MetricsSink> sink);
  void on_train_begin(const RunInfo& run, TrainerControl& control) override;
  void on_step_end(const StepReport& step, TrainerControl& control) override;
  void on_eval_end(const EvalReport& eval, TrainerControl& control) override;
  void on_checkpoint_begin(int64_t step, TrainerControl& control) override;
  void on_train_end(const RunSummary& summary) override;

 private:
  std::shared_ptr<MetricsSink> sink_;
};

// The log lines: progress every train.log_every_steps (a bar redrawn in place on a terminal),
// each evaluation, and each epoch's step-time breakdown and input-bound verdict.
class ProgressLogger : public Callback {
 public:
  ProgressLogger(bool terminal, int64_t every);
  void on_step_end(const StepReport& step, TrainerControl& control) override;
  void on_eval_end(const EvalReport& eval, TrainerControl& control) override;
  void on_epoch_end(const EpochReport& epoch, TrainerControl& control) override;

 private:
  Progress progress_;
};

// Whether a monitored metric got better: its best value and how many reports since.
struct Plateau {
  std::string monitor;   // a tag: "eval/loss", "eval/top1", "train/loss"
  bool maximize = false; // top-1 rises, loss falls
  double min_delta = 0;  // a smaller change is no improvement
  double best = NAN;
  int64_t waited = 0;
  // Takes a report's value; true when it improved on the best.
  bool update(const Scalars& scalars);
  std::string save() const;
  void load(const std::string& state);
};

// Stops the run when the monitored eval metric has not improved for `patience` evaluations.
class EarlyStopping : public Callback {
 public:
  EarlyStopping(std::string monitor, int64_t patience, bool maximize = false, double min_delta = 0.0);
  void on_eval_end(const EvalReport& eval, TrainerControl& control) override;
  std::string state_key() const override { return "early_stopping/" + plateau_.monitor; }
  std::string save_state() const override { return plateau_.save(); }
  void load_state(const std::string& state) override { plateau_.load(state); }

 private:
  Plateau plateau_;
  int64_t patience_;
};

// Multiplies the learning rate by `factor` when the monitored eval metric has not improved for
// `patience` evaluations (Keras's ReduceLROnPlateau), down to min_scale times the schedule's.
class ReduceLrOnPlateau : public Callback {
 public:
  ReduceLrOnPlateau(std::string monitor, double factor, int64_t patience, bool maximize = false,
                    double min_scale = 0.0);
  void on_eval_end(const EvalReport& eval, TrainerControl& control) override;
  std::string state_key() const override { return "reduce_lr_on_plateau/" + plateau_.monitor; }
  std::string save_state() const override { return plateau_.save(); }
  void load_state(const std::string& state) override { plateau_.load(state); }

 private:
  Plateau plateau_;
  double factor_, min_scale_;
  int64_t patience_;
};

// A callback from a function, for the step end alone (the common case in small programs).
class OnStepEnd : public Callback {
 public:
  explicit OnStepEnd(std::function<void(const StepReport&, TrainerControl&)> f) : f_(std::move(f)) {}
  void on_step_end(const StepReport& step, TrainerControl& control) override { f_(step, control); }

 private:
  std::function<void(const StepReport&, TrainerControl&)> f_;
};

}  // namespace tandem::train
