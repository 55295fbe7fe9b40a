// `trainer --config FILE [--set key.path=value]... [--run-dir DIR]`: the main job. Reads the
// config strictly, prepares missing data when the config says how, checks the devices, then
// trains and leaves the resolved config, metrics, events, checkpoints and run_summary.json.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>

#include "data/tensorboard_sink.h"
#include "engine/backend/doctor/cpu_probe.h"
#include "engine/core/context.h"
#include "engine/core/output_file.h"
#include "engine/distribute/bootstrap/client.h"
#include "engine/distribute/process_link.h"
#include "engine/train/callbacks.h"
#include "engine/train/checkpoint/checkpoint.h"
#include "engine/train/metrics_csv_sink.h"
#include "engine/train/processes.h"
#include "engine/train/run_lock.h"
#include "engine/train/stop_signals.h"
#include "tools/trainer/prepare_data.h"
#include "tools/trainer/run_outputs.h"
#include "tools/trainer/text_generation.h"
#include "tools/trainer/train_setup.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string run_dir;
};

void write_text(const std::filesystem::path& path, const std::string& text) {
  write_file_atomically(path, text, "train");
}

// A process other than 0: trains its replicas and leaves the run's outputs to process 0.
int run_follower(train::TrainerSetup setup) {
  const int rank = setup.processes.rank;
  train::StopSignals signals;  // a signal here stops every process after the same step
  setup.stop = &signals.flag();
  train::Trainer trainer(std::move(setup));
  train::RunSummary summary = trainer.run();
  spdlog::info("process {} done after {} steps; process 0 wrote the run's outputs", rank, summary.steps);
  return summary.stop_signal == 0 ? 0 : 128 + summary.stop_signal;
}

void print_summary(const train::RunSummary& s, const std::filesystem::path& run_dir) {
  if (s.timed_steps > 0) {
    spdlog::info("done: {} steps in {} epochs, {:.1f} {}/s (after warm-up), step time p50 {:.1f} ms, p95 {:.1f} ms",
                 s.steps, s.epochs, s.images_per_sec, s.throughput_unit == "tok" ? "tokens" : "images",
                 s.step_time_p50_ms, s.step_time_p95_ms);
    spdlog::info("step time: {}", s.breakdown.describe(s.timed_steps));
  } else {
    // Absent, not 0: no step was timed, so there is no rate to report.
    spdlog::info("done: {} steps in {} epochs; no step was timed (each one this run trained was within "
                 "train.warmup_steps_for_timing), so no throughput or step time is reported",
                 s.steps, s.epochs);
  }
  for (const auto& [name, value] : s.final_metrics) spdlog::info("final {}: {:.4f}", name, value);
  spdlog::info("outputs in {}", run_dir.string());
}

// After a byte-level GPT's run: a sample from its last checkpoint, as `trainer generate` would print
// it (temperature 0.8, the 40 likeliest bytes, the run's seed), so a run shows what it learned.
void print_text_sample(const RunConfig& config, const std::filesystem::path& checkpoints) {
  const train::ModelConfig& model = config.train.model;
  if (model.name != "gpt" || model.vocab_size != 256) return;
  std::optional<std::filesystem::path> last = train::CheckpointManager(checkpoints, 0).latest();
  if (!last) return;
  TextGeneration request{.checkpoint = *last, .prompt = "\n",
                         .options = {.max_new_tokens = 400, .temperature = 0.8f, .top_k = 40, .seed = config.train.seed}};
  spdlog::info("a sample of the trained model (trainer generate --checkpoint {} --max-new-tokens 400 --temperature "
               "0.8 --top-k 40 --seed {}):\n{}",
               last->string(), config.train.seed, generate_text(request));
}

// Whether two paths name the same directory, comparing absolute, normalised paths ("out/" is "out").
bool same_directory(const std::filesystem::path& a, const std::filesystem::path& b) {
  auto normal = [](const std::filesystem::path& p) {
    std::filesystem::path n = std::filesystem::absolute(p).lexically_normal();
    return n.has_filename() ? n : n.parent_path();
  };
  return normal(a) == normal(b);
}

// The data of a multi-process run: process 0 prepares it first (the others may share its
// filesystem), then every process checks its own copy (each prepares it where they do not).
void ensure_data_once(const RunConfig& config, distribute::ProcessLink* link) {
  if (link == nullptr) return ensure_data(config);
  link->rendezvous().share_from_process_zero("data-ready", "prepare the data", [&] {
    ensure_data(config);
    return std::string();
  });
  if (link->rank() != 0) ensure_data(config);
}

// The precision in effect and, on the CPU, the instructions that decide its speed.
void log_precision(const std::string& precision, const distribute::ReplicaPlan& plan) {
  if (!plan.devices.front().is_cpu()) {
    spdlog::info("precision {} on {}", precision, plan.devices.front().str());
    return;
  }
  const backend::CpuReport cpu = backend::probe_cpu();
  spdlog::info("precision {} on the CPU: {} ({}); fast here: {}", precision, cpu.model, cpu.extensions(),
               cpu.fast_precisions());
  if (precision == "bf16" && !cpu.fast_bf16()) spdlog::warn("{}", cpu.bf16_warning());
}

// Processes of one run on one host, none pinned to its own cores (taskset, a launcher's binding):
// each would give its replicas every core, so their threads together would oversubscribe the host
// many times over. The cores are shared out instead (threads_per_replica, when given, stands).
void share_host_cores(distribute::ReplicaPlan& plan, const distribute::ProcessLink& link,
                      const train::TrainConfig& config) {
  if (!plan.devices.front().is_cpu() || config.device.threads_per_replica > 0) return;
  const std::vector<std::string>& hosts = link.hosts();
  const auto here = std::count(hosts.begin(), hosts.end(), hosts[static_cast<size_t>(link.rank())]);
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (here < 2 || available_cores() < online) return;
  const int shared = std::max(1, available_cores() / static_cast<int>(here * plan.local_replicas()));
  if (shared == plan.threads_per_replica) return;
  if (link.rank() == 0) {
    spdlog::info("{} processes of this run share this host's {} cores: {} thread(s) per replica instead of {}", here,
                 available_cores(), shared, plan.threads_per_replica);
  }
  plan.threads_per_replica = shared;
}

int run_training(const TrainArgs& args) {
  RunConfig config = load_run_config(args.config, args.overrides);
  const distribute::ProcessGroupSpec processes =
      distribute::resolve_process_group(train::process_group_request(config.train), distribute::process_environment());
  const bool lead = processes.rank == 0;  // process 0 logs, writes and checkpoints the run
  distribute::ReplicaPlan plan = plan_for(config.train, processes);
  if (lead) {
    spdlog::info("{} (a single run: neither weak nor strong scaling)", plan.describe());
    log_precision(config.train.precision, plan);
  }
  if (!plan.fallback_warning.empty()) spdlog::warn("{}", plan.fallback_warning);
  if (!plan.oversubscribed_warning.empty()) spdlog::warn("{}", plan.oversubscribed_warning);
  const std::string requested = args.run_dir.empty() ? config.train.output.run_dir : args.run_dir;
  // The other processes write nothing there; they read checkpoints from it when resuming.
  std::filesystem::path run_dir = lead ? make_run_dir(config.path, requested) : std::filesystem::path(requested);
  // Before anything is written there: a second trainer on this directory stops here.
  std::optional<train::RunDirectoryLock> run_lock, checkpoint_lock;
  const std::filesystem::path checkpoints = train::checkpoint_dir(config.train, run_dir);
  if (lead) {
    run_lock.emplace(run_dir);
    // Its own lock too (two runs may share a checkpoint.dir while their run directories differ).
    if (!same_directory(checkpoints, run_dir)) checkpoint_lock.emplace(checkpoints);
    write_text(run_dir / "config.yaml", config.resolved_yaml + "\n");
  }
  std::shared_ptr<distribute::ProcessLink> link;
  if (processes.multi_process()) {
    link = train::join_processes(processes, config.shared_digest, plan.local_replicas(),
                                 train::watchdog_timeout(config.train), requested);
    share_host_cores(plan, *link, config.train);
    if (lead && config.train.deterministic && config.train.device.threads_per_replica == 0 &&
        plan.devices.front().is_cpu()) {
      // oneDNN's sums follow the thread count: the same bits need the same count, whatever the layout.
      spdlog::warn("deterministic: {} thread(s) per replica here, from this host's cores; a run laid out in other "
                   "processes gives other bits unless threads_per_replica pins the count (docs/DISTRIBUTE.md)",
                   plan.threads_per_replica);
    }
  }
  ensure_data_once(config, link.get());
  train::TrainerSetup setup = make_trainer_setup(config, plan, run_dir);
  setup.processes = processes;
  setup.link = link;
  if (!lead) return run_follower(std::move(setup));
  if (config.train.output.tensorboard) {
    setup.callbacks.push_back(std::make_shared<train::MetricsWriter>(std::make_shared<data::TensorBoardSink>(run_dir)));
  }
  if (config.train.output.metrics_csv) {
    setup.callbacks.push_back(std::make_shared<train::MetricsWriter>(std::make_shared<train::MetricsCsvSink>(run_dir)));
  }
  setup.callbacks.push_back(std::make_shared<train::ProgressLogger>(setup.terminal, config.train.loop.log_every_steps));
  auto start = std::chrono::steady_clock::now();
  train::StopSignals signals;  // the first SIGINT/SIGTERM/SIGHUP stops after the step, with a checkpoint
  setup.stop = &signals.flag();
  train::Trainer trainer(std::move(setup));
  train::RunSummary summary = trainer.run();
  summary.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_run_summary(run_dir / "run_summary.json", summary);
  print_summary(summary, run_dir);
  if (summary.stop_signal == 0) {
    print_text_sample(config, checkpoints);
    return 0;
  }
  const bool saved = std::filesystem::exists(checkpoints / fmt::format("step-{:08d}", summary.steps));
  spdlog::warn("stopped by signal {} after step {}; {}. Resume with: trainer --config {} --run-dir {} --set "
               "checkpoint.resume=auto",
               summary.stop_signal, summary.steps,
               saved ? fmt::format("the checkpoint of that step is in {}", checkpoints.string())
                     : std::string("no step was trained since the last checkpoint"),
               args.config, run_dir.string());
  return 128 + summary.stop_signal;  // as a shell reports a process the signal ended: 129, 130, 143
}

}  // namespace

void add_train_verb(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TrainArgs>();
  app.add_option("--config", args->config, "Train from this YAML config (see docs/CONFIG.md)");
  app.add_option("--set", args->overrides, "Override a config key: --set optimizer.lr=0.05 (repeatable)");
  app.add_option("--run-dir", args->run_dir, "Run directory (default: runs/<config name>-<time>)");
  app.callback([&app, &exit_code, args] {
    if (!app.get_subcommands().empty()) return;  // a verb ran instead
    if (args->config.empty()) {
      std::fputs(app.help().c_str(), stderr);
      exit_code = 2;
      return;
    }
    exit_code = run_training(*args);
  });
}

}  // namespace tandem::tools
