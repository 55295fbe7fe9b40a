// Trainer: builds the shared state (communicators, schedule, checkpoints, resume point),
// runs one ReplicaLoop thread per replica, and reports the first real failure.
#include "engine/train/trainer.h"

#include <spdlog/spdlog.h>

#include <thread>

#include "engine/train/replica.h"

namespace tandem::train {

int64_t Trainer::Shared::total_steps() const {
  const LoopConfig& loop = setup.config.loop;
  if (loop.steps > 0) return loop.steps;
  return setup.steps_per_epoch > 0 ? loop.epochs * setup.steps_per_epoch : 0;
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
  int r = s.plan.replicas();
  TANDEM_CHECK(r >= 1 && static_cast<int>(s.train_sources.size()) == r, ErrorCode::kInvalidArgument,
               "trainer: {} replicas but {} training sources", r, s.train_sources.size());
  TANDEM_CHECK(s.eval_sources.empty() || static_cast<int>(s.eval_sources.size()) == r, ErrorCode::kInvalidArgument,
               "trainer: {} replicas but {} evaluation sources", r, s.eval_sources.size());
  TANDEM_CHECK(s.make_model != nullptr, ErrorCode::kInvalidArgument, "trainer: no model factory");
  for (const Device& d : s.plan.devices) {
    TANDEM_CHECK(d.is_cpu(), ErrorCode::kUnimplemented,
                 "trainer: replicas on {} need the CUDA kernels and the NCCL communicator, which this build does not "
                 "wire into the training loop yet; use device: cpu",
                 d.str());
  }
}

void log_replica_change(const CheckpointMeta& resume, const distribute::ReplicaPlan& plan) {
  TANDEM_CHECK(!resume.replicas.empty(), ErrorCode::kDataLoss, "checkpoint of step {} holds no replica state",
               resume.step);
  if (static_cast<int>(resume.replicas.size()) == plan.replicas()) return;
  const auto& position = resume.replicas.front().data_position;
  int64_t examples = examples_into_epoch(resume.replicas.front(), plan.global_batch_size);
  spdlog::info("the checkpoint was written by {} replica(s), this run has {}: it continues from the same global "
               "position, {} examples into epoch {}, with this run's sharding",
               resume.replicas.size(), plan.replicas(), examples, position.value("epoch", resume.epoch) + 1);
  if (examples % plan.global_batch_size != 0) {
    spdlog::warn("{} examples is not a whole number of global batches of {}: the last {} are seen again", examples,
                 plan.global_batch_size, examples % plan.global_batch_size);
  }
}

}  // namespace

Trainer::Trainer(TrainerSetup setup) {
  check_setup(setup);
  Progress progress(setup.terminal, setup.config.loop.log_every_steps);
  shared_ = std::unique_ptr<Shared>(
      new Shared{std::move(setup), nullptr, nullptr, nullptr, std::nullopt, {}, progress, {}, {}, nullptr, false});
  Shared& s = *shared_;
  const TrainConfig& c = s.setup.config;
  distribute::CommunicatorOptions comm_options;
  comm_options.timeout = std::chrono::milliseconds(static_cast<int64_t>(c.distribute.watchdog_timeout_s * 1000));
  s.group = std::make_unique<distribute::CpuCommunicatorGroup>(s.setup.plan.replicas(), comm_options);
  int64_t total = s.total_steps();
  TANDEM_CHECK(total > 0 || c.schedule.name == "constant" || c.schedule.name == "step" ||
                   c.schedule.name == "multistep",
               ErrorCode::kInvalidArgument,
               "schedule.name {} decays over the whole run, whose length is unknown: set train.steps, or use TFRecords "
               "whose record counts can be read",
               c.schedule.name);
  s.schedule = std::make_unique<optim::LrSchedule>(c.schedule, c.optimizer.lr, s.setup.plan.global_batch_size,
                                                   std::max<int64_t>(total, 1));
  std::filesystem::path dir =
      c.checkpoint.dir.empty() ? s.setup.run_dir / "checkpoints" : std::filesystem::path(c.checkpoint.dir);
  s.checkpoints = std::make_unique<CheckpointManager>(dir, static_cast<int>(c.checkpoint.keep_last));
  if (auto path = resolve_resume(c.checkpoint.resume, *s.checkpoints)) {
    s.resume = validate_checkpoint(*path);
    spdlog::info("resuming from {} (step {}, epoch {})", path->string(), s.resume->step, s.resume->epoch);
    log_replica_change(*s.resume, s.setup.plan);
  }
  s.positions.resize(static_cast<size_t>(s.setup.plan.replicas()));
}

Trainer::~Trainer() = default;

RunSummary Trainer::run() {
  Shared& s = *shared_;
  int replicas = s.setup.plan.replicas();
  std::vector<std::thread> threads;
  for (int r = 0; r < replicas; ++r) {
    threads.emplace_back([&s, r] {
      try {
        ReplicaLoop(s, r).run();
      } catch (const Error& e) {
        s.record_error(std::current_exception(), e.code() == ErrorCode::kAborted);
        s.group->abort(fmt::format("replica {} failed: {}", r, e.what()));
      } catch (const std::exception& e) {
        s.record_error(std::current_exception(), false);
        s.group->abort(fmt::format("replica {} failed: {}", r, e.what()));
      }
    });
  }
  for (auto& t : threads) t.join();
  s.progress.finish_line();
  if (s.first_error) std::rethrow_exception(s.first_error);
  for (MetricsSink* sink : s.setup.sinks) sink->flush();
  return s.summary;
}

}  // namespace tandem::train
