// The typed configuration of a training run, one struct per YAML section, every field with
// its default (documented in docs/CONFIG.md). The `data:` sections are data::PipelineConfig,
// read by data/; tools/ puts the whole file together (engine/ does not include data/).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/context.h"
#include "engine/core/yaml_walk.h"
#include "engine/distribute/process_group.h"
#include "engine/distribute/replica_plan.h"
#include "engine/nn/model_spec.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"

namespace tandem::train {

// device: where replicas run. devices: which ones (all GPUs, a count, a list, or cpu:N).
struct DeviceConfig {
  std::string device = "auto";       // auto | cpu | cuda
  std::string devices = "all";       // all | N | [0, 1] (as "[0,1]") | cpu:N
  int threads_per_replica = 0;       // CPU replicas' compute threads; 0: the cores over the replicas
};

using ModelConfig = nn::ModelSpec;

struct LoopConfig {
  int64_t global_batch_size = 0;       // exactly one of these two must be given
  int64_t per_replica_batch_size = 0;
  int64_t epochs = 1;
  int64_t steps = 0;                   // > 0: stop after this many steps instead of epochs
  int64_t eval_every_steps = 0;        // 0: evaluate at the end of each epoch
  int64_t log_every_steps = 50;
  float label_smoothing = 0.0f;
  double clip_grad_norm = 0.0;         // 0: no clipping
  int64_t warmup_steps_for_timing = 5; // steps left out of throughput and step-time figures
  // Micro-batches per step: each replica's batch is split into this many, their gradients added up
  // before the one all-reduce of the step (DDP's no_sync). 1: no accumulation.
  int64_t grad_accumulation_steps = 1;
  // A training loss that is NaN or infinite at a log line: fail (stop the run with an error naming
  // the steps; the last checkpoint keeps the weights before) or warn (once, and train on).
  std::string on_nan_loss = "fail";
};

struct CheckpointConfig {
  std::string dir;                  // default: <run_dir>/checkpoints
  int64_t every_steps = 0;          // 0: at the end of each epoch
  int64_t keep_last = 3;
  std::string resume = "none";      // none | auto | a checkpoint directory
};

struct DistributeConfig {
  bool sync_batchnorm = false;
  double first_bucket_mb = 1.0;
  double bucket_cap_mb = 25.0;
  std::string allreduce_dtype = "fp32";  // bf16: gradients rounded to bf16 for the all-reduce
  double watchdog_timeout_s = 300.0;
  int64_t checksum_every_steps = 100;
  // Several processes (one per node): usually from the launcher (mpirun, srun, torchrun-style
  // RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT); these keys are the fallback. docs/DISTRIBUTE.md.
  int64_t processes = 0;            // 0: from the launcher, else 1
  int64_t process_rank = -1;
  std::string address;              // the rendezvous (process 0's host)
  int64_t port = 0;                 // 0: MASTER_PORT, else 29500
  std::string token;                // a shared secret every process must present (or TANDEM_DIST_TOKEN)
  std::string run_id;               // processes with different run ids never train together
};

struct OutputConfig {
  std::string run_dir;              // default: runs/<config name>-<yyyymmdd-hhmmss>
  bool tensorboard = true;
  bool metrics_csv = true;
};

// Where the TFRecords come from when they are missing (`prepare: fashion-mnist`). The trainer
// tool checks the source's name (tools/trainer/prepare_data.cpp: none, fashion-mnist, mnist,
// bible-kjv).
struct PrepareConfig {
  std::string source = "none";
  std::string output_dir;           // where `trainer convert` writes the shards
};

struct TrainConfig {
  uint64_t seed = 0;
  bool deterministic = false;
  std::string precision = "fp32";  // fp32 | tf32 | bf16: the arithmetic of convolutions and matmuls
  bool cudnn_benchmark = false;    // time cuDNN's algorithms once per shape instead of its heuristics
  DeviceConfig device;
  ModelConfig model;
  LoopConfig loop;
  optim::OptimizerOptions optimizer;
  optim::ScheduleOptions schedule;
  CheckpointConfig checkpoint;
  DistributeConfig distribute;
  OutputConfig output;
  PrepareConfig prepare;
};

// The top-level keys this struct reads, each to its section parser; tools/ adds `data` and
// `eval_data` and walks the document once, so an unknown top-level key is still an error.
void add_train_keys(TrainConfig& config, yaml::Keys& keys);

// The model section of a config document (a checkpoint's meta.json keeps the run's resolved
// config): what `trainer generate` builds its model from. NotFound when there is no model section.
ModelConfig model_config_from_text(const std::string& config_text);

// Checks across sections (exactly one batch size, schedule milestones within the run, ...).
void validate(const TrainConfig& config);

// distribute.watchdog_timeout_s as the collectives' (and the rendezvous's) deadline.
std::chrono::milliseconds watchdog_timeout(const TrainConfig& config);

// The kernel options of a replica's ExecutionContext (precision, determinism, algorithm search).
KernelOptions kernel_options(const TrainConfig& config);

// The replica-plan request of the device and batch keys; how many GPUs are usable, and why not,
// is for the caller to add (the trainer asks the doctor).
distribute::ReplicaPlanRequest plan_request(const TrainConfig& config);

// The distribute.* keys of a multi-process run, for distribute::resolve_process_group.
distribute::ProcessGroupRequest process_group_request(const TrainConfig& config);

}  // namespace tandem::train
