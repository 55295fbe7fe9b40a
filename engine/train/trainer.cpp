// Trainer: builds the shared state (communicators, schedule, checkpoints, resume point),
// runs one ReplicaLoop thread per replica, and reports the first real failure.
#include "engine/train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <limits>
#include <set>
#include <thread>

#include "engine/backend/doctor/cpu_probe.h"
#include "engine/distribute/bootstrap/client.h"
#include "engine/train/checkpoint/fs.h"
#include "engine/train/processes.h"
#include "engine/train/progress.h"
#include "engine/train/replica.h"
#include "engine/train/tasks.h"

namespace tandem::train {

int64_t Trainer::Shared::total_steps() const {
  const LoopConfig& loop = setup.config.loop;
  if (loop.steps > 0) return loop.steps;
  return setup.steps_per_epoch > 0 ? loop.epochs * setup.steps_per_epoch : 0;
}

distribute::Communicator& Trainer::Shared::device_communicator(int rank) {
  if (solo) return *solo;
  if (device_group) return device_group->communicator(rank);
  return group->communicator(rank);
}

void Trainer::Shared::abort(const std::string& reason) noexcept {
  group->abort(reason);
  if (device_group) device_group->abort(reason);
  if (solo) solo->abort(reason);
  // The other processes see this one's connections close; the rendezvous tells them why.
  if (link) link->report_failure(reason);
}

void Trainer::Shared::record_error(std::exception_ptr error, bool is_abort) {
  std::lock_guard lock(error_mutex);
  // The root cause wins over the "aborted because replica r failed" errors it triggers.
  if (!first_error || (first_error_is_abort && !is_abort)) {
    first_error = error;
    first_error_is_abort = is_abort;
  }
}

namespace {

void check_setup(const TrainerSetup& s) {
  int r = s.plan.local_replicas();
  TANDEM_CHECK(s.plan.processes == s.processes.size && s.plan.process_rank == s.processes.rank,
               ErrorCode::kInvalidArgument, "trainer: the replica plan is for process {} of {}, the process group says "
               "{} of {}", s.plan.process_rank, s.plan.processes, s.processes.rank, s.processes.size);
  TANDEM_CHECK(r >= 1 && static_cast<int>(s.train_sources.size()) == r, ErrorCode::kInvalidArgument,
               "trainer: {} replicas but {} training sources", r, s.train_sources.size());
  TANDEM_CHECK(s.eval_sources.empty() || static_cast<int>(s.eval_sources.size()) == r, ErrorCode::kInvalidArgument,
               "trainer: {} replicas but {} evaluation sources", r, s.eval_sources.size());
  TANDEM_CHECK(s.make_model != nullptr, ErrorCode::kInvalidArgument, "trainer: no model factory");
  std::set<std::string> keys;
  for (const auto& callback : s.callbacks) {
    TANDEM_CHECK(callback != nullptr, ErrorCode::kInvalidArgument, "trainer: a null callback");
    const std::string key = callback->state_key();
    TANDEM_CHECK(key.empty() || keys.insert(key).second, ErrorCode::kInvalidArgument,
                 "trainer: two callbacks save their state under '{}': state keys must be unique", key);
  }
  const Device first = s.plan.devices.front();
  for (const Device& d : s.plan.devices) {
    TANDEM_CHECK(d.type == first.type, ErrorCode::kInvalidArgument,
                 "trainer: replicas on {} and {}: all replicas must be on one kind of device", first.str(), d.str());
  }
  const int64_t k = s.config.loop.grad_accumulation_steps, per_replica = s.plan.per_replica_batch_size;
  if (k > 1 && per_replica % k != 0) {
    // The nearest global batches whose per-replica share k divides.
    const int64_t unit = k * s.plan.replicas(), lower = s.plan.global_batch_size / unit * unit;
    throw_error(ErrorCode::kInvalidArgument,
                "train.grad_accumulation_steps {} does not divide the per-replica batch {} (global batch {} over {} "
                "replica(s)): each replica's micro-batch must be whole; use a global batch that is a multiple of "
                "{} (for example {} or {}), or another grad_accumulation_steps",
                k, per_replica, s.plan.global_batch_size, s.plan.replicas(), unit, lower > 0 ? lower : unit,
                lower + unit);
  }
  if (first.is_cpu() && s.config.precision == "bf16") {
    const backend::CpuReport cpu = backend::probe_cpu();
    TANDEM_CHECK(cpu.runs_bf16(), ErrorCode::kInvalidArgument, "{}", cpu.bf16_refusal());
  }
  TANDEM_CHECK(!first.is_cpu() || s.config.precision != "tf32", ErrorCode::kInvalidArgument,
               "precision: tf32 needs GPU replicas (TF32 is a tensor-core format; CPUs have none): set precision: fp32 "
               "or bf16 on the CPU, or device: cuda");
}

std::vector<int> cuda_indices(const distribute::ReplicaPlan& plan) {
  std::vector<int> out;
  for (const Device& d : plan.devices) out.push_back(d.index);
  return out;
}

// The data positions a resumed run trusts to skip what was trained: each replica's epoch is the
// checkpoint's, its batch count is a non-negative integer that (when the epoch's length is known)
// fits in the epoch, and every replica is at the same batch. An edited or damaged meta.json would
// otherwise train other data with no error.
void check_resume_positions(const CheckpointMeta& meta, const std::filesystem::path& path, int64_t steps_per_epoch,
                            int64_t global_batch) {
  auto fail = [&](size_t replica, const std::string& what) {
    throw_error(ErrorCode::kDataLoss,
                "checkpoint {}: meta.json's replicas[{}].data_position {}; the run cannot know which data it trained. "
                "Resume from another checkpoint (checkpoint.resume: a step directory) or start afresh",
                path.string(), replica, what);
  };
  std::optional<int64_t> first_batches;
  for (size_t r = 0; r < meta.replicas.size(); ++r) {
    const nlohmann::json& p = meta.replicas[r].data_position;
    if (!p.is_object()) fail(r, "is not an object");
    for (const char* key : {"epoch", "batches", "global_batch"}) {
      if (p.contains(key) && !p[key].is_number_integer()) fail(r, fmt::format("\"{}\" is not an integer", key));
    }
    const int64_t epoch = p.value("epoch", meta.epoch);
    const int64_t batches = p.value("batches", int64_t{0});
    const int64_t batch = p.value("global_batch", global_batch);
    if (epoch != meta.epoch) fail(r, fmt::format("is in epoch {}, the checkpoint in epoch {}", epoch, meta.epoch));
    if (batch <= 0) fail(r, fmt::format("has global_batch {}", batch));
    if (batches < 0 || batches > std::numeric_limits<int64_t>::max() / batch) {
      fail(r, fmt::format("counts {} batches of {} into the epoch", batches, batch));
    }
    // Examples into the epoch: at most one epoch's (a last partial batch may round up once).
    if (steps_per_epoch > 0 && batches > (steps_per_epoch + 1) * global_batch / batch + 1) {
      fail(r, fmt::format("counts {} batches of {} into an epoch of {} steps of {}", batches, batch, steps_per_epoch,
                          global_batch));
    }
    if (first_batches && batches != *first_batches) {
      fail(r, fmt::format("counts {} batches, replica 0 {}: replicas step together", batches, *first_batches));
    }
    first_batches = batches;
  }
}

void log_replica_change(const CheckpointMeta& resume, const distribute::ReplicaPlan& plan) {
  TANDEM_CHECK(!resume.replicas.empty(), ErrorCode::kDataLoss, "checkpoint of step {} holds no replica state",
               resume.step);
  const auto& position = resume.replicas.front().data_position;
  const int64_t saved_batch = position.value("global_batch", plan.global_batch_size);
  if (same_batches_as(resume, plan)) return;
  int64_t examples = examples_into_epoch(resume.replicas.front(), plan.global_batch_size);
  // A batch-size change is the run's, not the data source's: it continues from the global position.
  spdlog::info("the checkpoint was written by {} replica(s) with global batch {}, this run has {} with {}: it continues "
               "from the same global position, {} examples into epoch {}, with this run's sharding",
               resume.replicas.size(), saved_batch, plan.replicas(), plan.global_batch_size, examples,
               position.value("epoch", resume.epoch) + 1);
  if (examples % plan.global_batch_size != 0) {
    spdlog::warn("{} examples is not a whole number of global batches of {}: the last {} are seen again", examples,
                 plan.global_batch_size, examples % plan.global_batch_size);
  }
}

void open_gpu_monitor(Trainer::Shared& s) {
  std::string why_not;
  s.gpu_monitor = backend::GpuMonitor::open(&why_not);
  if (!s.gpu_monitor) {
    spdlog::info("GPU utilisation, memory and power will not be logged: {}", why_not);
    return;
  }
  if (!s.gpu_monitor->mapping_note().empty()) spdlog::info("NVML: {}", s.gpu_monitor->mapping_note());
  s.gpu_indices = cuda_indices(s.setup.plan);
  s.gpu_idle_warned.assign(s.gpu_indices.size(), 0);
}

// Process 0's choice, made once the directory is known to hold one run's checkpoints only.
std::optional<std::filesystem::path> checked_resume(Trainer::Shared& s) {
  std::optional<std::filesystem::path> found = resolve_resume(s.setup.config.checkpoint.resume, *s.checkpoints);
  std::optional<std::string> run;
  if (found) run = validate_checkpoint(*found).run_id;
  try {
    check_one_run(*s.checkpoints, run);
  } catch (const Error& e) {
    if (found || s.setup.config.checkpoint.resume != "auto") throw;
    // resume: auto skipped them (their tensors failed their checksums: the warnings above name them).
    throw Error(e.code(), fmt::format("{}. resume: auto found none of them undamaged (the warnings above name "
                                      "the damage): move them away, or resume one by path",
                                      e.what()));
  }
  // A checkpoint from before run ids gets a new one: its older siblings are left alone by keep_last.
  s.checkpoints->set_run_id(run && !run->empty() ? *run : new_run_id());
  return found;
}

// The checkpoint to resume from. Process 0 decides (resume: auto may see another newest one than a
// process started a moment later) and tells the others its absolute path ("" for none), or why it
// could not, so that nobody waits for an answer that never comes.
std::optional<std::filesystem::path> agreed_resume(Trainer::Shared& s) {
  if (!s.link) return checked_resume(s);
  std::optional<std::filesystem::path> mine;
  const std::string said = s.link->rendezvous().share_from_process_zero("resume", "resume", [&] {
    mine = checked_resume(s);
    return mine ? std::filesystem::absolute(*mine).string() : std::string();
  });
  if (s.link->rank() == 0) return mine;
  if (said.empty()) return std::nullopt;
  std::filesystem::path path = said;
  TANDEM_CHECK(std::filesystem::exists(path / CheckpointManager::kMetaFile), ErrorCode::kNotFound,
               "process 0 resumes from {}, but process {} cannot read it: checkpoint.dir must be on a filesystem "
               "every process reads (or copied there), and --run-dir the same on every process",
               path.string(), s.link->rank());
  return path;
}

// The host communicators: in this process, or over every process (the rendezvous first: a
// process of another config, version, run id or token is refused there).
void connect_processes(Trainer::Shared& s, const distribute::CommunicatorOptions& options) {
  const int local = s.setup.plan.local_replicas();
  if (!s.setup.processes.multi_process()) {
    s.group = std::make_unique<distribute::CpuCommunicatorGroup>(local, options);
    return;
  }
  s.link = s.setup.link ? s.setup.link
                        : join_processes(s.setup.processes, s.setup.config_hash.empty()
                                                                ? distribute::config_digest(s.setup.resolved_config)
                                                                : s.setup.config_hash,
                                         local, options.timeout);
  TANDEM_CHECK(s.link->local_replicas() == local && s.link->rank() == s.setup.processes.rank,
               ErrorCode::kInvalidArgument, "trainer: the process link is for process {} with {} replica(s), the plan "
               "for process {} with {}", s.link->rank(), s.link->local_replicas(), s.setup.processes.rank, local);
  // deterministic: true fixes the order of every sum over the global replica index.
  s.group = std::make_unique<distribute::CpuCommunicatorGroup>(local, options, *s.link, s.setup.config.deterministic);
}

// The callbacks' state and learning-rate scale as the checkpoint saved them.
void restore_callbacks(Trainer::Shared& s) {
  s.control.set_lr_scale(s.resume->lr_scale);
  for (const auto& callback : s.setup.callbacks) {
    const std::string key = callback->state_key();
    if (key.empty()) continue;
    auto saved = s.resume->callbacks.find(key);
    if (saved != s.resume->callbacks.end()) {
      callback->load_state(saved->second);
    } else {
      spdlog::warn("the checkpoint of step {} has no state for callback '{}' (added since?): it starts afresh",
                   s.resume->step, key);
    }
  }
}

}  // namespace

Trainer::Trainer(TrainerSetup setup) {
  check_setup(setup);
  if (!setup.task) setup.task = make_task(setup.config);
  shared_ = std::make_unique<Shared>(std::move(setup));
  Shared& s = *shared_;
  const TrainConfig& c = s.setup.config;
  distribute::CommunicatorOptions comm_options;
  comm_options.timeout = watchdog_timeout(c);
  connect_processes(s, comm_options);
  if (s.setup.plan.replicas() == 1) {
    // One replica: no NCCL to set up (and fail), no gradient buckets to pack (ReplicaLoop).
    s.solo = std::make_unique<distribute::SoloCommunicator>(s.setup.plan.devices.front());
  } else if (!s.setup.plan.devices.front().is_cpu()) {
    s.device_group = s.link ? std::make_unique<distribute::NcclCommunicatorGroup>(cuda_indices(s.setup.plan),
                                                                                 comm_options, *s.link)
                            : std::make_unique<distribute::NcclCommunicatorGroup>(cuda_indices(s.setup.plan),
                                                                                 comm_options);
  }
  if (!s.setup.plan.devices.front().is_cpu()) open_gpu_monitor(s);
  int64_t total = s.total_steps();
  TANDEM_CHECK(total > 0 || c.schedule.name == "constant" || c.schedule.name == "step" ||
                   c.schedule.name == "multistep",
               ErrorCode::kInvalidArgument,
               "schedule.name {} decays over the whole run, whose length is unknown: set train.steps, or use TFRecords "
               "whose record counts can be read",
               c.schedule.name);
  s.schedule = std::make_unique<optim::LrSchedule>(c.schedule, c.optimizer.lr, s.setup.plan.global_batch_size,
                                                   std::max<int64_t>(total, 1));
  // Process 0 makes the run directory it writes into, as TF's CheckpointManager makes its own.
  if (s.setup.processes.rank == 0 && !s.setup.run_dir.empty()) fs::create_directories(s.setup.run_dir);
  s.checkpoints = std::make_unique<CheckpointManager>(
      checkpoint_dir(c, s.setup.run_dir),
      CheckpointOptions{.keep_last = static_cast<int>(c.checkpoint.keep_last), .after_stage = {},
                        .owner = s.setup.processes.rank == 0});
  if (auto path = agreed_resume(s)) {
    s.resume = validate_checkpoint(*path);
    check_resume_positions(*s.resume, *path, s.setup.steps_per_epoch, s.setup.plan.global_batch_size);
    s.resume_path = *path;  // the replicas load exactly this directory, not their own of that step
    // Epochs counted from 1, as every other log line counts them.
    spdlog::info("resuming from {} (step {}, {} epoch(s) complete: the run goes on in epoch {})", path->string(),
                 s.resume->step, s.resume->epoch, s.resume->epoch + 1);
    log_replica_change(*s.resume, s.setup.plan);
  }
  if (s.resume) restore_callbacks(s);
  s.positions.resize(static_cast<size_t>(s.setup.plan.local_replicas()));
}

Trainer::~Trainer() = default;

std::filesystem::path checkpoint_dir(const TrainConfig& config, const std::filesystem::path& run_dir) {
  return config.checkpoint.dir.empty() ? run_dir / "checkpoints" : std::filesystem::path(config.checkpoint.dir);
}

RunSummary Trainer::run() {
  Shared& s = *shared_;
  const auto start = std::chrono::steady_clock::now();
  int replicas = s.setup.plan.local_replicas();
  std::vector<std::thread> threads;
  for (int r = 0; r < replicas; ++r) {
    threads.emplace_back([&s, r] {
      const int global = s.setup.plan.first_replica() + r;
      try {
        ReplicaLoop(s, r).run();
      } catch (const Error& e) {
        s.record_error(std::current_exception(), e.code() == ErrorCode::kAborted);
        s.abort(fmt::format("replica {} failed: {}", global, e.what()));
      } catch (const std::exception& e) {
        s.record_error(std::current_exception(), false);
        s.abort(fmt::format("replica {} failed: {}", global, e.what()));
      }
    });
  }
  for (auto& t : threads) t.join();
  finish_progress_line();
  if (s.first_error) std::rethrow_exception(s.first_error);
  if (s.link) {
    // Nobody leaves (process 0 takes the rendezvous with it) while another may still need it.
    s.link->barrier(0);
    s.link->goodbye();
  }
  // This run's wall time, from the start of run() (set-up before it is the caller's).
  s.summary.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (s.setup.processes.rank != 0) return s.summary;  // process 0 reports the run
  for (const auto& callback : s.setup.callbacks) callback->on_train_end(s.summary);
  return s.summary;
}

}  // namespace tandem::train
