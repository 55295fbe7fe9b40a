// CheckpointMeta: everything a checkpoint holds besides tensors (step, epoch, each replica's data
// position and RNG state, the resolved config, metrics), and its meta.json form. docs/CHECKPOINTS.md
// lists the fields.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/core/random.h"

namespace tandem::train {

struct ReplicaState {
  // Where this replica is in its data (file, record, shuffle state): opaque here, the loader's own.
  nlohmann::json data_position = nlohmann::json::object();
  Generator::State rng{};
};

struct CheckpointMeta {
  static constexpr int kFormatVersion = 1;

  int64_t step = 0;   // global training steps completed
  int64_t epoch = 0;  // epochs completed (the position inside the epoch is in data_position)
  std::vector<ReplicaState> replicas;
  std::string config;                     // the resolved config, as text (YAML or JSON)
  std::map<std::string, double> metrics;  // e.g. train_loss, eval_top1; NaN survives as null
  // The step of the evaluation whose eval_* figures `metrics` holds; -1 when none ran (older
  // checkpoints too). A run resumed at its end evaluates when this is not its step.
  int64_t evaluated_step = -1;
  // The log interval under way at the save: its first step - 1 and the training metrics' sums over
  // every replica (then the example count), so a resumed run's first log row averages the steps an
  // uninterrupted run's would. Start -1: none (older checkpoints, or sums that were not finite).
  int64_t interval_start = -1;
  std::vector<double> interval_sums;
  double wall_time_s = 0;                 // training wall time so far
  double lr_scale = 1.0;                  // TrainerControl::set_lr_scale's factor (callbacks)
  std::map<std::string, std::string> callbacks;  // Callback::state_key() -> save_state()

  // Filled by CheckpointManager::save (from the optimizer and the build) and read back by load.
  int format_version = kFormatVersion;
  std::string optimizer;  // "sgd", "adamw"
  int64_t optimizer_steps = 0;
  double lr = 0;
  std::string tandem_version;
  std::string saved_at;  // UTC, ISO 8601
  // The run that wrote it: made when a run starts fresh, kept by every run resumed from it, so
  // keep_last and resume: auto never take another run's checkpoint for this one's. "" for
  // checkpoints written before run ids existed.
  std::string run_id;
};

// A new run id: 16 hex digits of the time and 16 of std::random_device.
std::string new_run_id();

// The global position a replica's data position records: the examples of its epoch that all
// replicas together have consumed, batches x global batch (fallback_global_batch for positions
// that do not name theirs).
int64_t examples_into_epoch(const ReplicaState& state, int64_t fallback_global_batch);

// The version of Tandem this library was built as ("0.1.0").
std::string tandem_version();

nlohmann::json meta_to_json(const CheckpointMeta& meta);
// One replica's entry of meta.json's "replicas" (also how processes send theirs to process 0).
nlohmann::json replica_state_to_json(const ReplicaState& state);
// DataLoss naming `where` and the field when one is missing or mistyped.
ReplicaState replica_state_from_json(const nlohmann::json& j, const std::string& where);
// Every field is checked; a missing or mistyped one is DataLoss naming source and the field.
CheckpointMeta meta_from_json(const nlohmann::json& j, const std::filesystem::path& source);

}  // namespace tandem::train
