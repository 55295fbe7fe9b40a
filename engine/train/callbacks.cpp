#include "engine/train/callbacks.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "engine/core/error.h"

namespace tandem::train {

double Scalars::get(std::string_view tag) const {
  for (const auto& [name, value] : values) {
    if (name == tag) return value;
  }
  return NAN;
}

void TrainerControl::request_stop(std::string reason) {
  if (stop_requested_) return;  // the first reason stands
  stop_requested_ = true;
  stop_reason_ = std::move(reason);
}

void TrainerControl::set_lr_scale(double scale) {
  TANDEM_CHECK(std::isfinite(scale) && scale >= 0, ErrorCode::kInvalidArgument,
               "set_lr_scale({}): the scale must be a finite number >= 0", scale);
  lr_scale_ = scale;
}

MetricsWriter::MetricsWriter(std::shared_ptr<MetricsSink> sink) : sink_(std::move(sink)) {
  TANDEM_CHECK(sink_ != nullptr, ErrorCode::kInvalidArgument, "MetricsWriter: no sink");
}

void MetricsWriter::on_train_begin(const RunInfo& run, TrainerControl&) { sink_->resume_at(run.start_step); }

void MetricsWriter::on_step_end(const StepReport& step, TrainerControl&) {
  if (!step.has_metrics) return;
  for (const auto& [tag, value] : step.scalars.values) sink_->scalar(tag, value, step.step);
}

void MetricsWriter::on_eval_end(const EvalReport& eval, TrainerControl&) {
  for (const auto& [tag, value] : eval.scalars.values) sink_->scalar(tag, value, eval.step);
}

// Before the save, not after: a kill between the save and a later flush would lose rows of steps
// the resumed run starts after and never writes again.
void MetricsWriter::on_checkpoint_begin(int64_t, TrainerControl&) { sink_->flush(); }

void MetricsWriter::on_train_end(const RunSummary&) { sink_->flush(); }

ProgressLogger::ProgressLogger(bool terminal, int64_t every) : progress_(terminal, every) {}

void ProgressLogger::on_step_end(const StepReport& s, TrainerControl&) {
  if (!s.has_metrics) return;
  progress_.update({.epoch = s.epoch,
                    .epochs = s.epochs,
                    .step_in_epoch = s.step_in_epoch,
                    .steps_in_epoch = s.steps_per_epoch,
                    .global_step = s.step,
                    .images_per_sec = s.images_per_sec,
                    .unit = s.unit,
                    .loss = s.loss,
                    .lr = s.lr,
                    .input_wait_fraction = s.input_wait_fraction,
                    .devices = s.devices});
}

void ProgressLogger::on_eval_end(const EvalReport& eval, TrainerControl&) {
  finish_progress_line();
  spdlog::info("eval at step {}: {} on {} {}", eval.step, eval.text, eval.examples, eval.unit);
}

void ProgressLogger::on_epoch_end(const EpochReport& e, TrainerControl&) {
  finish_progress_line();
  spdlog::info("epoch {} done: {} steps; step time: {}", e.epoch + 1, e.steps, e.times.describe(e.steps));
  spdlog::info("epoch {} input pipeline: {}", e.epoch + 1,
               input_bound_verdict(e.times.total() > 0 ? e.times.input_wait / e.times.total() : 0.0));
  if (e.dropped_examples > 0) {
    spdlog::info("epoch {}: {} examples dropped because not every replica had a full batch", e.epoch + 1,
                 e.dropped_examples);
  }
}

bool Plateau::update(const Scalars& scalars) {
  double value = scalars.get(monitor);
  if (std::isnan(value)) {
    std::string tags;
    for (const auto& [tag, v] : scalars.values) tags += (tags.empty() ? "" : ", ") + tag;
    throw_error(ErrorCode::kInvalidArgument, "the monitored metric '{}' is not among the reported ones: {}", monitor,
                tags.empty() ? std::string("none") : tags);
  }
  const bool improved = std::isnan(best) || (maximize ? value > best + min_delta : value < best - min_delta);
  if (improved) {
    best = value;
    waited = 0;
  } else {
    ++waited;
  }
  return improved;
}

std::string Plateau::save() const { return fmt::format("{} {}", best, waited); }

void Plateau::load(const std::string& state) {
  std::istringstream in(state);
  std::string best_text;
  in >> best_text >> waited;
  TANDEM_CHECK(!in.fail(), ErrorCode::kDataLoss, "the checkpoint's state of the callback on '{}' is '{}', not "
               "'<best> <evaluations since>'", monitor, state);
  best = best_text == "nan" ? NAN : std::stod(best_text);
}

EarlyStopping::EarlyStopping(std::string monitor, int64_t patience, bool maximize, double min_delta)
    : plateau_{std::move(monitor), maximize, min_delta}, patience_(patience) {
  TANDEM_CHECK(patience_ >= 1, ErrorCode::kInvalidArgument, "EarlyStopping: patience {} must be >= 1", patience_);
}

void EarlyStopping::on_eval_end(const EvalReport& eval, TrainerControl& control) {
  if (plateau_.update(eval.scalars) || plateau_.waited < patience_) return;
  control.request_stop(fmt::format("early stopping: {} has not improved on {:.4f} for {} evaluation(s)",
                                   plateau_.monitor, plateau_.best, plateau_.waited));
}

ReduceLrOnPlateau::ReduceLrOnPlateau(std::string monitor, double factor, int64_t patience, bool maximize,
                                     double min_scale)
    : plateau_{std::move(monitor), maximize}, factor_(factor), min_scale_(min_scale), patience_(patience) {
  TANDEM_CHECK(factor_ > 0 && factor_ < 1 && patience_ >= 1, ErrorCode::kInvalidArgument,
               "ReduceLrOnPlateau: factor {} must be in (0, 1) and patience {} >= 1", factor_, patience_);
}

void ReduceLrOnPlateau::on_eval_end(const EvalReport& eval, TrainerControl& control) {
  if (plateau_.update(eval.scalars) || plateau_.waited < patience_) return;
  const double scale = std::max(control.lr_scale() * factor_, min_scale_);
  if (scale < control.lr_scale()) {
    spdlog::info("{} has not improved for {} evaluation(s): learning rate scaled by {:g} from step {} on",
                 plateau_.monitor, plateau_.waited, scale, eval.step + 1);
    control.set_lr_scale(scale);
  }
  plateau_.waited = 0;
}

}  // namespace tandem::train
