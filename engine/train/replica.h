// One replica's state and its loop (internal to engine/train): what each replica thread owns,
// and what the replicas share (the plan, the communicator group, replica 0's reports).
#pragma once

#include <atomic>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/backend/doctor/nvml.h"
#include "engine/distribute/cpu_communicator.h"
#include "engine/distribute/gradient_bucketer.h"
#include "engine/distribute/nccl_communicator.h"
#include "engine/distribute/process_link.h"
#include "engine/distribute/solo_communicator.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/train/checkpoint/checkpoint.h"
#include "engine/train/step_timer.h"
#include "engine/train/trainer.h"

namespace tandem::train {

struct Trainer::Shared {
  explicit Shared(TrainerSetup s) : setup(std::move(s)) {}

  TrainerSetup setup;
  // The other processes of a multi-process run (null in a single process); declared before the
  // communicators, which use it until they are destroyed.
  std::shared_ptr<distribute::ProcessLink> link;
  // Host-side collectives among the replica threads (per-step votes, counters, metric sums): cheap,
  // and no device synchronisation. On CPU replicas they carry the gradients too.
  std::unique_ptr<distribute::CpuCommunicatorGroup> group;
  // NCCL among GPU replicas: gradients, the weights' broadcast, checksums, evaluation sums.
  std::unique_ptr<distribute::NcclCommunicatorGroup> device_group;
  // A run of one replica (on any device) has no group: its collectives are the identity.
  std::unique_ptr<distribute::SoloCommunicator> solo;
  // What nvidia-smi would show for the replicas' GPUs, sampled by replica 0 at each log line; null
  // on CPU replicas or without NVML (the log said why once).
  std::unique_ptr<backend::GpuMonitor> gpu_monitor;
  std::vector<int> gpu_indices;
  std::vector<backend::GpuSample> gpu_samples;  // reused at every log line
  std::vector<char> gpu_idle_warned;            // one idle-GPU warning per GPU and run
  std::unique_ptr<optim::LrSchedule> schedule;
  std::unique_ptr<CheckpointManager> checkpoints;
  std::optional<CheckpointMeta> resume;  // what a resumed run starts from
  std::filesystem::path resume_path;     // the checkpoint directory it was read from
  std::vector<ReplicaState> positions;   // by local replica: each writes its own before a checkpoint
  TrainerControl control;  // the callbacks' requests: read and written by replica 0 only
  RunSummary summary;  // written by replica 0
  std::mutex error_mutex;
  std::exception_ptr first_error;
  bool first_error_is_abort = false;

  int64_t total_steps() const;
  void record_error(std::exception_ptr error, bool is_abort);
  void abort(const std::string& reason) noexcept;
  // The communicator of a replica's device tensors: NCCL on GPUs, the host group on the CPU, the
  // solo communicator when the run has one replica.
  distribute::Communicator& device_communicator(int rank);
  // Replica 0: calls f(callback) for each callback in order.
  template <typename F>
  void for_each_callback(F&& f) {
    for (const auto& callback : setup.callbacks) f(*callback);
  }
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
    std::optional<uint32_t> next;  // stopped on request: the fingerprint of the batch fetched, not trained
  };
  EpochEnd train_epoch(int64_t epoch, int64_t skip_batches);
  // An epoch that gave no step would repeat forever (train.steps) or end the run having trained
  // nothing (epochs): both are errors that say why.
  [[noreturn]] void throw_no_batch(int64_t epoch, int64_t dropped) const;
  // The epoch and the batches into it where a resumed run starts (0, 0 for a fresh run).
  std::pair<int64_t, int64_t> resume_position() const;
  // The per-step agreement of every replica: whether each has a full batch, whether any saw a
  // stop request (TrainerSetup::stop, or a callback's on replica 0), so that all stop after the
  // same step, and replica 0's callbacks' learning-rate scale.
  struct Vote {
    bool all_have_batch = false;
    bool stop = false;
  };
  // rows: this replica's batch size (0 without one), for the micro-batch count all agree on.
  Vote vote(bool have_batch, int64_t rows);
  // The schedule's learning rate at a step, times the lr scale the replicas agreed on.
  float lr_at(int64_t step) const;
  void train_step(const Batch& batch);
  // The first batch of the epoch a resumed run trains again, against the checkpoint's fingerprint.
  void check_resumed_batch(const Batch& batch, int64_t epoch, int64_t index);
  // Waits for the reduced gradients and applies the optimizer (per bucket when it can).
  void reduce_and_update();
  // Whether a step counts for throughput and the timed breakdown (past the warm-up steps).
  bool timed(int64_t step) const;
  // Adds device phases of finished steps to the epoch's breakdown and, past warm-up, the run's.
  void add_phases(const std::vector<std::pair<int64_t, DevicePhases>>& steps, StepBreakdown& epoch);
  // Reads the step metrics at log steps and, on replica 0, calls on_step_end.
  void report_step(int64_t epoch, int64_t step_in_epoch);
  // At a log line and before a checkpoint, on every replica (the summed stats are the same
  // everywhere): a NaN or infinite training loss stops the run (train.on_nan_loss: fail) or is
  // warned about once (warn).
  void check_loss_is_finite(const Tensor& summed_stats);
  // NaN or inf in a parameter (finite_guard.h), handled as a NaN loss is (train.on_nan_loss).
  void check_parameters_are_finite();
  // From a checkpoint's log interval: where it started and its sums (carried by global replica 0).
  void resume_log_interval(const CheckpointMeta& resume);
  // Micro-batch `index` of train.grad_accumulation_steps: a view of its share of the batch's rows.
  Batch micro_batch(const Batch& batch, int64_t index, int64_t count) const;
  // One replica (no bucketer): parameters no gradient reached get zeros, named once.
  void fill_missing_gradients();
  // Replicas 1..R-1's running statistics for the checkpoint, when they differ from replica 0's
  // (per-replica BatchNorm); a collective: every replica calls it, replica 0 gets the map.
  TensorMap gather_replica_buffers();
  // Replica 0, at a log line: each GPU's utilisation, memory and power to the report's scalars.
  std::string report_gpus(double input_wait_fraction);
  void report_epoch(int64_t epoch, int64_t steps, const StepBreakdown& times, int64_t dropped);
  void evaluate(int64_t step);
  // For the resume check, the fingerprint of the last trained batch or of the fetched, untrained
  // next one (a stop request's); neither at an epoch's end.
  void checkpoint(int64_t epoch, int64_t batches_into_epoch, const Batch* last_trained = nullptr,
                  std::optional<uint32_t> next_fingerprint = std::nullopt);
  // Replica 0: the metrics, lr scale and callback states a checkpoint keeps.
  void fill_run_state(CheckpointMeta& meta) const;
  // Every replica's position, in global replica order: this process's directly, the other
  // processes' gathered (a collective: every replica calls it).
  std::vector<ReplicaState> all_positions();
  // Global replica 0: the one that calls callbacks, writes checkpoints and logs the run.
  bool lead() const { return global_rank_ == 0; }
  double reduce_scalar_sum(double value);
  bool done() const;

  Trainer::Shared& shared_;
  const TrainConfig& config_;
  const distribute::ReplicaPlan& plan_;
  int rank_;         // among this process's replicas: its device, source and communicator
  int global_rank_;  // process rank x local replicas + rank_: its seed, data position, and name
  Task& task_;
  std::unique_ptr<ExecutionContext> ctx_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<distribute::GradientBucketer> bucketer_;
  std::unique_ptr<StepTimer> timer_;
  distribute::Communicator* comm_ = nullptr;       // device tensors (gradients, weights)
  distribute::Communicator* host_comm_ = nullptr;  // host tensors (votes, counters)
  // (4) f32 on the host: the per-step vote (I have a full batch, the stop signal I saw, and
  // replica 0's callbacks' stop request and learning-rate scale).
  Tensor flag_;
  int64_t micro_batches_ = 1;  // of the step about to run: agreed by vote()
  std::vector<std::string> train_metrics_;  // the task's
  Tensor stats_;   // (metrics + 1) f32 on the device: the task's metric sums and examples since the last log line
  Tensor host_stats_;  // stats_ read back at a log line, then summed over replicas
  Tensor one_;     // [] f32 1 on the device, for tasks' add_to_sum
  float lr_scale_ = 1.0f;  // agreed by the last vote
  StepReport report_;  // replica 0's, reused
  // From the checkpoint a run resumes (same replica count): which batch its fingerprint is of.
  std::string resume_fingerprint_of_;
  uint32_t resume_fingerprint_ = 0;

  int64_t step_ = 0;          // global steps completed
  int64_t start_step_ = 0;    // where this run started (the resumed step, or 0)
  int64_t last_checkpoint_step_ = -1;
  int64_t last_eval_step_ = -1;  // the step of the last evaluation (carried by checkpoints)
  std::vector<double> interval_sums_;  // the log interval's sums at the last checkpoint (all replicas)
  double carried_examples_ = 0;        // examples of the first log interval a resumed run did not time
  int64_t timed_steps_ = 0;   // steps after warm-up, for throughput
  std::optional<double> last_train_loss_;  // none until a log line measured it
  int64_t last_log_step_ = 0;  // the step of the last log line (the start of the next interval)
  bool nan_loss_warned_ = false;
  bool nan_parameters_warned_ = false;
  int64_t parameters_checked_at_ = -1;  // the step whose weights check_parameters_are_finite last read
  std::set<std::string> warned_no_grad_;
  std::vector<double> step_times_;
  StepBreakdown timed_breakdown_;
  double timed_seconds_ = 0;
  double interval_input_ = 0, interval_total_ = 0;  // for the progress line's input-wait share
  int64_t dropped_ = 0;
  bool input_checked_ = false;  // the first batch matched the model's configured input
  int64_t units_per_example_ = 1;  // Task::units_per_example of the first batch
  bool stopped_ = false;  // every replica agreed to stop early (a signal, or a callback's request)
  int stop_signal_ = 0;  // the signal of that request (0: none, or a callback's)
  bool buffers_identical_ = false;  // BatchNorm statistics equal across replicas (1 replica, or synchronised)
};

// The resumed checkpoint has this run's replica count and global batch: each replica takes its own
// saved position (and the resumed batch's fingerprint is checked); else the global position counts.
bool same_batches_as(const CheckpointMeta& resume, const distribute::ReplicaPlan& plan);

}  // namespace tandem::train
