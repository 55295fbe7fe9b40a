// Turning a RunConfig into a running Trainer: the device check (the doctor's diagnosis when no
// GPU can be used), the replica plan, each replica's input pipeline and the model factory.
#pragma once

#include <filesystem>

#include "engine/distribute/replica_plan.h"
#include "engine/train/progress.h"
#include "engine/train/trainer.h"
#include "tools/trainer/run_config.h"

namespace tandem::tools {

// The replica plan for the config's device settings; runs the doctor unless the config asks
// for the CPU only, so `device: cuda` without a usable GPU stops with the reason. A fallback
// to the CPU under `device: auto` is in plan.fallback_warning for the caller to log.
// With several processes, the batch arithmetic is over every process's replicas.
distribute::ReplicaPlan plan_for(const train::TrainConfig& config, const distribute::ProcessGroupSpec& processes = {});

// Sources for every replica from a data section, with the plan's per-replica batch; logs the
// shard plan. steps_per_epoch is set when the record counts are known (else left as is).
std::vector<std::unique_ptr<BatchSource>> make_sources(data::PipelineConfig config,
                                                              const distribute::ReplicaPlan& plan,
                                                              const train::TrainConfig& train, bool for_eval,
                                                              int64_t* steps_per_epoch);

// Builds the full TrainerSetup (model factory, sources) for a plan and a run directory.
train::TrainerSetup make_trainer_setup(const RunConfig& config, const distribute::ReplicaPlan& plan,
                                       const std::filesystem::path& run_dir);

}  // namespace tandem::tools
