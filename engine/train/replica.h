// One replica's state and its loop (internal to engine/train): what each replica thread owns,
// and what the replicas share (the plan, the communicator group, replica 0's reports).
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backend/doctor/nvml.h"
#include "engine/distribute/cpu_communicator.h"
#include "engine/distribute/gradient_bucketer.h"
#include "engine/distribute/nccl_communicator.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/train/checkpoint.h"
#include "engine/train/progress.h"
#include "engine/train/step_timer.h"
#include "engine/train/trainer.h"

namespace tandem::train {

struct Trainer::Shared {
  Shared(TrainerSetup s, Progress p) : setup(std::move(s)), progress(p) {}

  TrainerSetup setup;
  // Host-side collectives among the replica threads (per-step votes, counters, metric sums): cheap,
  // and no device synchronisation. On CPU replicas they carry the gradients too.
  std::unique_ptr<distribute::CpuCommunicatorGroup> group;
  // NCCL among GPU replicas: gradients, the weights' broadcast, checksums, evaluation sums.
  std::unique_ptr<distribute::NcclCommunicatorGroup> device_group;
  // What nvidia-smi would show for the replicas' GPUs, sampled by replica 0 at each log line; null
  // on CPU replicas or without NVML (the log said why once).
  std::unique_ptr<backend::GpuMonitor> gpu_monitor;
  std::vector<int> gpu_indices;
  std::vector<backend::GpuSample> gpu_samples;  // reused at every log line
  std::vector<char> gpu_idle_warned;            // one idle-GPU warning per GPU and run
  std::unique_ptr<optim::LrSchedule> schedule;
  std::unique_ptr<CheckpointManager> checkpoints;
  std::optional<CheckpointMeta> resume;  // what a resumed run starts from
  std::vector<ReplicaState> positions;   // each replica writes its own before a checkpoint
  Progress progress;
  RunSummary summary;  // written by replica 0
  std::mutex error_mutex;
  std::exception_ptr first_error;
  bool first_error_is_abort = false;

  int64_t total_steps() const;
  void record_error(std::exception_ptr error, bool is_abort);
  void abort(const std::string& reason) noexcept;
  // The communicator of a replica's device tensors: NCCL on GPUs, the host group on the CPU.
  distribute::Communicator& device_communicator(int rank);
};

// The loop of one replica thread; run() returns when training ends or throws on failure.
class ReplicaLoop {
 public:
  ReplicaLoop(Trainer::Shared& shared, int rank);
  void run();

 private:
  void setup();
  void run_epochs();
  // For an out-of-memory error: the batch, what the allocator held, and a batch size that would fit.
  std::string out_of_memory_advice() const;
  struct EpochEnd {
    int64_t batches = 0;     // consumed in this epoch (skipped ones included)
    bool completed = false;  // the epoch ran to its end (not stopped by train.steps)
    int64_t steps = 0;       // trained in this call
    int64_t dropped = 0;     // examples of incomplete batches, over every replica
  };
  EpochEnd train_epoch(int64_t epoch, int64_t skip_batches);
  // An epoch that gave no step would repeat forever (train.steps) or end the run having trained
  // nothing (epochs): both are errors that say why.
  [[noreturn]] void throw_no_batch(int64_t epoch, int64_t dropped) const;
  // The epoch and the batches into it where a resumed run starts (0, 0 for a fresh run).
  std::pair<int64_t, int64_t> resume_position() const;
  // The per-step agreement of every replica: whether each has a full batch, and whether any saw a
  // stop request (TrainerSetup::stop), so that all stop after the same step.
  struct Vote {
    bool all_have_batch = false;
    bool stop = false;
  };
  Vote vote(bool have_batch);
  void train_step(const Batch& batch);
  // Waits for the reduced gradients and applies the optimizer (per bucket when it can).
  void reduce_and_update();
  // Whether a step counts for throughput and the timed breakdown (past the warm-up steps).
  bool timed(int64_t step) const;
  // Adds device phases of finished steps to the epoch's breakdown and, past warm-up, the run's.
  void add_phases(const std::vector<std::pair<int64_t, DevicePhases>>& steps, StepBreakdown& epoch);
  void log_step(int64_t epoch, int64_t step_in_epoch);
  // Replica 0, at a log line: each GPU's utilisation, memory and power to the sinks and the line.
  std::string report_gpus(double input_wait_fraction);
  void evaluate(int64_t step);
  void checkpoint(int64_t epoch, int64_t batches_into_epoch);
  double reduce_scalar_sum(double value);
  bool done() const;

  Trainer::Shared& shared_;
  const TrainConfig& config_;
  const distribute::ReplicaPlan& plan_;
  int rank_;
  std::unique_ptr<ExecutionContext> ctx_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<distribute::GradientBucketer> bucketer_;
  std::unique_ptr<StepTimer> timer_;
  distribute::Communicator* comm_ = nullptr;       // device tensors (gradients, weights)
  distribute::Communicator* host_comm_ = nullptr;  // host tensors (votes, counters)
  Tensor flag_;    // (2) f32 on the host: the per-step vote (I have a full batch, I saw a stop request)
  Tensor stats_;   // (3) f32 on the device: loss sum, correct, examples since the last log line
  Tensor host_stats_;  // (3) f32 on the host: stats_ read back at a log line, then summed over replicas

  int64_t step_ = 0;          // global steps completed
  int64_t start_step_ = 0;    // where this run started (the resumed step, or 0)
  int64_t last_checkpoint_step_ = -1;
  int64_t timed_steps_ = 0;   // steps after warm-up, for throughput
  double last_train_loss_ = 0;
  std::vector<double> step_times_;
  StepBreakdown timed_breakdown_;
  double timed_seconds_ = 0;
  double interval_input_ = 0, interval_total_ = 0;  // for the progress line's input-wait share
  int64_t dropped_ = 0;
  bool input_checked_ = false;  // the first batch matched the model's configured input
  int stop_signal_ = 0;  // the stop request every replica agreed on (0: none)
  bool buffers_identical_ = false;  // BatchNorm statistics equal across replicas (1 replica, or synchronised)
};

}  // namespace tandem::train
