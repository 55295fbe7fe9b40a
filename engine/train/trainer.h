// The training loop: one thread per replica, each with its own model, optimizer, context and
// batch source, kept identical by a bucketed all-reduce of gradients. Replicas agree at every
// step that each has a full batch, so an uneven shard ends the epoch for all, never a hang.
// What a step computes comes from a Task (task.h); what a program sees and steers, from its
// Callbacks (callback.h).
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/batch.h"
#include "engine/distribute/process_group.h"
#include "engine/distribute/replica_plan.h"
#include "engine/nn/module.h"
#include "engine/train/callback.h"
#include "engine/train/config.h"
#include "engine/train/metrics.h"
#include "engine/train/task.h"

namespace tandem::distribute {
class ProcessLink;  // engine/distribute/process_link.h
}

namespace tandem::train {

struct TrainerSetup {
  TrainConfig config;
  distribute::ReplicaPlan plan;  // this process's replicas; plan.processes must be processes.size
  // A multi-process run (docs/DISTRIBUTE.md): this process's rank, the count and the rendezvous.
  // The sources, callbacks and run directory are this process's; only process 0 calls callbacks
  // and writes checkpoints. Default: a single process.
  distribute::ProcessGroupSpec processes;
  // What every process must agree on to train together (with the version and the run id): a hash
  // of the resolved config without its per-process keys. Empty: a hash of resolved_config.
  std::string config_hash;
  // The joined processes, when the caller joined them before (the CLI does, to prepare the data
  // once); null: the Trainer joins them.
  std::shared_ptr<distribute::ProcessLink> link;
  // Builds one replica's model on the host; replica 0's initial weights are broadcast to all.
  // Called once on each replica's thread, with the same seed set for nn::init on every one.
  std::function<std::shared_ptr<nn::Module>()> make_model;
  // The loss and metrics of a step; null: ImageClassification(config.model, loop.label_smoothing).
  // One object serves every replica thread: its methods must not change shared state.
  std::shared_ptr<Task> task;
  std::vector<std::unique_ptr<BatchSource>> train_sources;  // one per replica of this process
  std::vector<std::unique_ptr<BatchSource>> eval_sources;   // one per replica of this process, or none
  int64_t steps_per_epoch = 0;  // known from the shard plan; 0 when unknown
  // Called in this order from replica 0's thread (callback.h); the CLI adds MetricsWriter and
  // ProgressLogger (callbacks.h).
  std::vector<std::shared_ptr<Callback>> callbacks;
  // Where process 0 writes (checkpoints by default, RunInfo::run_dir for callbacks); the Trainer
  // makes it, with its parents, when missing.
  std::filesystem::path run_dir;
  std::string resolved_config;  // stored in checkpoints
  // Metrics are read from the device at every step on CPU replicas (a progress bar redrawn on a
  // terminal), not only every loop.log_every_steps.
  bool terminal = false;
  // When it turns non-zero (StopSignals::flag(), or any flag a program sets), every replica stops
  // after the same step, a checkpoint of that step is saved, and run() returns with
  // RunSummary::stop_signal set to its value. Null: run to the end.
  const std::atomic<int>* stop = nullptr;
};

// Where a run's checkpoints go: checkpoint.dir, or run_dir/checkpoints when it is empty.
std::filesystem::path checkpoint_dir(const TrainConfig& config, const std::filesystem::path& run_dir);

class Trainer {
 public:
  explicit Trainer(TrainerSetup setup);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to the end (epochs or steps), evaluating and checkpointing as configured, or until a
  // callback or the stop flag ends it early. Throws the first replica's error (the root cause,
  // not the other replicas' "aborted").
  RunSummary run();

  struct Shared;  // the state replica threads share (engine/train/replica.h), internal

 private:
  std::unique_ptr<Shared> shared_;
};

}  // namespace tandem::train
