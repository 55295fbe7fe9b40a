#include "tools/trainer/train_setup.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "data/pipeline/replica_pipeline.h"
#include "engine/backend/doctor/doctor.h"
#include "models/registry.h"
#include "data/pipeline/pipeline_batch_source.h"

namespace tandem::tools {

distribute::ReplicaPlan plan_for(const train::TrainConfig& c, const distribute::ProcessGroupSpec& processes) {
  distribute::ReplicaPlanRequest request = train::plan_request(c);
  request.processes = processes.size;
  request.process_rank = processes.rank;
  if (c.device.device != "cpu" && !c.device.devices.starts_with("cpu:")) {
    backend::DoctorOptions options;
    options.probe_plugin = true;
    options.required_device = c.device.device;
    backend::DoctorReport report = backend::run_doctor(options);
    request.visible_gpus = report.plugin_loaded ? static_cast<int>(report.gpus.size()) : 0;
    for (const auto& cause : report.causes) {
      if (cause.severity != backend::Severity::kWarning) {
        request.why_no_gpu = cause.summary + "; fix: " + cause.fix;
        break;
      }
    }
  }
  return distribute::plan_replicas(request);
}

namespace {

// The augmentation defaults are training's (random resized crop, flip): an eval_data section that
// does not turn them off evaluates randomly changed images, whose figures move from one evaluation
// to the next. Kept as written (a config may mean it), but said.
void warn_of_random_evaluation(const data::PipelineConfig& config) {
  const data::AugmentOptions& a = config.image.augment;
  if (config.tokens || (!a.random_resized_crop && !a.horizontal_flip && a.crop_padding == 0)) return;
  std::vector<std::string> random;
  if (a.random_resized_crop) random.push_back("random_resized_crop");
  if (a.crop_padding > 0) random.push_back("crop_padding");
  if (a.horizontal_flip) random.push_back("horizontal_flip");
  spdlog::warn("eval_data augments its images at random ({}), so every evaluation sees other images and its figures "
               "move; set eval_data.image.augment: {{random_resized_crop: false, horizontal_flip: false}} (the "
               "defaults are training's)",
               fmt::join(random, ", "));
}

}  // namespace

std::vector<std::unique_ptr<BatchSource>> make_sources(data::PipelineConfig config,
                                                              const distribute::ReplicaPlan& plan,
                                                              const train::TrainConfig& train, bool for_eval,
                                                              int64_t* steps_per_epoch) {
  config.batch_size = plan.per_replica_batch_size;
  config.image.augment.layout = train.model.channels_last ? data::ImageLayout::kNHWC : data::ImageLayout::kNCHW;
  config.image.num_classes = train.model.num_classes;  // a bad label names its file and record
  if (config.seed == 0) config.seed = train.seed;
  if (for_eval) {
    config.drop_remainder = false;  // every evaluation example counts
    warn_of_random_evaluation(config);
  }
  data::ReplicaPipelines pipelines = data::build_replica_pipelines(
      config, plan.replicas(), plan.first_replica(), plan.local_replicas(), plan.process_rank == 0);
  std::vector<std::unique_ptr<BatchSource>> sources;
  for (const data::Dataset& dataset : pipelines.datasets) {
    // Image records give "image" and "label"; token windows (data.tokens) give "tokens" (N, length) i64.
    sources.push_back(data::make_batch_source(config, dataset, train.model.channels_last, pipelines.budget));
  }
  // Every process counts over every replica: all stop at the same step.
  int64_t fewest = INT64_MAX;
  int fewest_rank = 0;
  int64_t total = 0;
  for (int r = 0; r < plan.replicas(); ++r) {
    const int64_t expected = pipelines.plan.replicas[static_cast<size_t>(r)].expected_records;
    total = (expected < 0 || total < 0) ? -1 : total + expected;
    if (expected < fewest) {
      fewest = expected;
      fewest_rank = r;
    }
  }
  // Counted and empty: a run that would never evaluate says so before it trains.
  TANDEM_CHECK(!for_eval || total != 0, ErrorCode::kFailedPrecondition,
               "the evaluation data holds 0 records, so nothing would ever be evaluated: point eval_data.files "
               "(for `trainer eval` without eval_data, data.files) at the evaluation records, or remove the "
               "eval_data section to train without evaluation");
  if (steps_per_epoch == nullptr || fewest < 0 || fewest == INT64_MAX) return sources;
  // Counted: say now, not after an epoch of nothing, when no epoch can give a step.
  TANDEM_CHECK(!config.drop_remainder || fewest >= plan.per_replica_batch_size, ErrorCode::kFailedPrecondition,
               "data: replica {} gets {} record(s) per epoch, but a step needs a full batch of {} on each of the {} "
               "replica(s) (train.global_batch_size {}), so no epoch would give a training step: lower "
               "train.global_batch_size, or add records to data.files",
               fewest_rank, fewest, plan.per_replica_batch_size, plan.replicas(), plan.global_batch_size);
  // drop_remainder: false trains a last, partial batch too: one more step, which the schedule must
  // count (a floor here left the run's last steps at lr 0).
  const int64_t per = plan.per_replica_batch_size;
  *steps_per_epoch = config.drop_remainder ? fewest / per : (fewest + per - 1) / per;
  return sources;
}

train::TrainerSetup make_trainer_setup(const RunConfig& rc, const distribute::ReplicaPlan& plan,
                                       const std::filesystem::path& run_dir) {
  const train::TrainConfig& c = rc.train;
  train::TrainerSetup setup;
  setup.config = c;
  setup.plan = plan;
  setup.config_hash = rc.shared_digest;
  setup.make_model = [spec = c.model] { return models::create_model(spec); };
  setup.train_sources = make_sources(rc.data, setup.plan, c, false, &setup.steps_per_epoch);
  if (rc.eval_data) setup.eval_sources = make_sources(*rc.eval_data, setup.plan, c, true, nullptr);
  setup.run_dir = run_dir;
  setup.resolved_config = rc.resolved_yaml;
  setup.terminal = train::stderr_is_terminal();
  return setup;
}

}  // namespace tandem::tools
