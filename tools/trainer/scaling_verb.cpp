// `trainer scaling --config FILE --replicas 1,2,4,8 [--mode strong|weak] [--steps N]
// [--processes P]`: trains the same config briefly at each replica count (no evaluation,
// TensorBoard or CSV) and reports throughput, step times, the step-time breakdown and efficiency
// as markdown, CSV and SVG. Under a launcher (mpirun, srun, RANK/WORLD_SIZE), or with --processes
// P on this machine, each replica count is per process, over every process, and the report shows
// the time in collectives across processes apart.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>

#include "engine/core/output_file.h"
#include "tools/trainer/prepare_data.h"
#include "tools/trainer/run_outputs.h"
#include "tools/trainer/scaling_report.h"
#include "tools/trainer/train_setup.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {
namespace {

struct ScalingArgs {
  std::string config;
  std::vector<int> replicas;
  std::string mode = "strong";
  int64_t steps = 30;
  std::vector<std::string> overrides;
  std::string out;
  int processes = 1;  // launch this many processes here (when no launcher did)
};

// What every run shares: the devices kind and the batch held fixed across replica counts.
struct Baseline {
  bool cpu = true;
  int64_t batch = 0;  // strong: the global batch; weak: the per-replica batch
};

Baseline baseline_for(const ScalingArgs& args) {
  RunConfig config = load_run_config(args.config, args.overrides);
  const train::TrainConfig& c = config.train;
  Baseline b;
  b.cpu = c.device.device == "cpu" || c.device.devices.starts_with("cpu:");
  // Runs the doctor when the config may use GPUs; device: auto without one falls back to the CPU.
  distribute::ReplicaPlan plan = plan_for(c);
  if (!b.cpu) b.cpu = plan.devices.front().is_cpu();
  if (args.mode == "strong") {
    b.batch = plan.global_batch_size;
  } else {
    b.batch = c.loop.per_replica_batch_size > 0 ? c.loop.per_replica_batch_size : c.loop.global_batch_size;
  }
  return b;
}

std::string gpu_list(int replicas) {
  std::string out = "[";
  for (int i = 0; i < replicas; ++i) out += fmt::format("{}{}", i ? "," : "", i);
  return out + "]";
}

// The config for `local` replicas in each of `processes` processes: the fixed batch over all of
// them, a short run, and nothing but training.
RunConfig config_for(const ScalingArgs& args, const Baseline& base, int local, int processes,
                     const std::filesystem::path& dir) {
  RunConfig config = load_run_config(args.config, args.overrides);
  train::TrainConfig& c = config.train;
  c.device.device = base.cpu ? "cpu" : "cuda";
  c.device.devices = base.cpu ? fmt::format("cpu:{}", local) : gpu_list(local);
  const int replicas = local * processes;
  if (args.mode == "strong") {
    TANDEM_CHECK(base.batch % replicas == 0, ErrorCode::kInvalidArgument,
                 "scaling: strong mode keeps the global batch {} fixed, which {} replicas do not divide; "
                 "pick replica counts that divide it or --set train.global_batch_size=...",
                 base.batch, replicas);
    c.loop.global_batch_size = base.batch;
    c.loop.per_replica_batch_size = 0;
  } else {
    c.loop.global_batch_size = 0;
    c.loop.per_replica_batch_size = base.batch;
  }
  c.loop.steps = args.steps;
  c.loop.eval_every_steps = 0;
  config.eval_data.reset();  // no evaluation sources: the trainer skips evaluation entirely
  // A run always saves once at its end; keep that one in this run's directory, nothing mid-run.
  c.checkpoint.every_steps = 0;
  c.checkpoint.keep_last = 1;
  c.checkpoint.resume = "none";
  c.checkpoint.dir = (dir / "checkpoints").string();
  c.output.tensorboard = false;
  c.output.metrics_csv = false;
  train::validate(c);
  return config;
}

// One replica count (per process); processes: this process's place in the run of that count.
ScalingRow run_one(const ScalingArgs& args, const Baseline& base, int replicas, const std::filesystem::path& out,
                   const distribute::ProcessGroupSpec& processes) {
  std::filesystem::path dir = out / fmt::format("replicas-{}", replicas * processes.size);
  if (processes.rank == 0) {
    // Each measurement is a fresh run, and a run never shares its checkpoint folder with another
    // (docs/CHECKPOINTS.md): an earlier scaling run's checkpoint here is its throwaway end state.
    if (std::filesystem::exists(dir / "checkpoints")) {
      spdlog::info("scaling: removing {}, the checkpoints of an earlier scaling run into {}",
                   (dir / "checkpoints").string(), out.string());
      std::filesystem::remove_all(dir / "checkpoints");
    }
    std::filesystem::create_directories(dir);
  }
  RunConfig config = config_for(args, base, replicas, processes.size, dir);
  distribute::ReplicaPlan plan = plan_for(config.train, processes);
  if (processes.rank == 0) spdlog::info("scaling ({}): {}", args.mode, plan.describe());
  train::TrainerSetup setup = make_trainer_setup(config, plan, dir);
  setup.processes = processes;
  train::Trainer trainer(std::move(setup));
  train::RunSummary s = trainer.run();
  ScalingRow row{.replicas = s.replicas, .processes = processes.size, .inter_process_ms = s.inter_process_ms_per_step,
                 .global_batch = s.global_batch_size, .per_replica_batch = s.per_replica_batch_size,
                 .images_per_sec = s.images_per_sec, .step_p50_ms = s.step_time_p50_ms,
                 .step_p95_ms = s.step_time_p95_ms, .breakdown = s.breakdown};
  row.unit = s.throughput_unit == "tok" ? "tokens" : "images";
  if (processes.rank == 0) {
    spdlog::info("scaling: {} replicas, {:.1f} {}/s, step p50 {:.1f} ms; {}", s.replicas, s.images_per_sec, row.unit,
                 s.step_time_p50_ms, s.breakdown.describe(s.timed_steps));
  }
  return row;
}

// Set in the processes --processes starts, which run the same command line without starting more.
constexpr const char* kChildVariable = "TANDEM_SCALING_CHILD";

// Each of P processes on this machine gets its own share of the cores, as on a node of its own
// (and its replicas as many threads as there): process `rank` takes cores rank x k .. of k each.
void pin_to_share(int rank, int processes) {
  cpu_set_t all;
  if (::sched_getaffinity(0, sizeof all, &all) != 0) return;
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) cores.push_back(c);
  }
  const int share = static_cast<int>(cores.size()) / processes;
  if (share < 1) return;  // fewer cores than processes: they share them all
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int i = rank * share; i < (rank + 1) * share; ++i) CPU_SET(cores[static_cast<size_t>(i)], &mine);
  ::sched_setaffinity(0, sizeof mine, &mine);
}

// --processes P on this machine: processes 1..P-1 are this program again, told their rank by the
// torchrun-style variables (and this process becomes rank 0); their logs go to out/process-K.log.
std::vector<pid_t> launch_local_processes(int processes, const std::filesystem::path& out) {
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> words;
  for (std::string word; std::getline(cmdline, word, '\0');) words.push_back(word);
  TANDEM_CHECK(!words.empty(), ErrorCode::kInternal, "scaling: cannot read /proc/self/cmdline to start processes");
  const int port = distribute::kDefaultRendezvousPort + static_cast<int>(::getpid() % 1000) * 16;
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(processes).c_str(), 1);
  std::vector<pid_t> children;
  for (int rank = 1; rank < processes; ++rank) {
    const std::string log = (out / fmt::format("process-{}.log", rank)).string();
    pid_t pid = ::fork();
    TANDEM_CHECK(pid >= 0, ErrorCode::kUnavailable, "scaling: fork for process {} failed: {}", rank,
                 std::strerror(errno));
    if (pid == 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv(kChildVariable, "1", 1);
      pin_to_share(rank, processes);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (std::string& w : words) argv.push_back(w.data());
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      ::_exit(127);
    }
    children.push_back(pid);
  }
  ::setenv("RANK", "0", 1);
  pin_to_share(0, processes);
  spdlog::info("scaling: started {} more process(es) here, rendezvous at 127.0.0.1:{}; their logs: {}/process-K.log",
               processes - 1, port, out.string());
  return children;
}

// Waits for the processes --processes started; an error names one that failed.
void wait_local_processes(const std::vector<pid_t>& children, const std::filesystem::path& out) {
  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    ::waitpid(children[i], &status, 0);
    TANDEM_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, ErrorCode::kAborted,
                 "scaling: process {} ended with status {}; see {}", i + 1, status,
                 (out / fmt::format("process-{}.log", i + 1)).string());
  }
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  write_file_atomically(path, text, "scaling");
}

int run_scaling(const ScalingArgs& args) {
  TANDEM_CHECK(args.mode == "strong" || args.mode == "weak", ErrorCode::kInvalidArgument,
               "scaling: --mode must be strong or weak, not '{}'", args.mode);
  for (int r : args.replicas) {
    TANDEM_CHECK(r >= 1, ErrorCode::kInvalidArgument, "scaling: replica count {} is not positive", r);
  }
  RunConfig first = load_run_config(args.config, args.overrides);
  TANDEM_CHECK(args.steps > first.train.loop.warmup_steps_for_timing, ErrorCode::kInvalidArgument,
               "scaling: --steps {} leaves no timed steps after the {} warm-up steps", args.steps,
               first.train.loop.warmup_steps_for_timing);
  TANDEM_CHECK(args.processes >= 1, ErrorCode::kInvalidArgument, "scaling: --processes {} is not positive",
               args.processes);
  const auto env = distribute::process_environment();
  const auto request = train::process_group_request(first.train);
  distribute::ProcessGroupSpec processes = distribute::resolve_process_group(request, env);
  // Only process 0 writes the report; the others need no directory.
  std::filesystem::path out =
      processes.rank == 0 ? make_run_dir(args.config, args.out, "runs") : std::filesystem::path(args.out);
  // Before any other process starts here: they read the data process 0 prepares. (Under a
  // launcher the others do not wait for it: prepare the data first.)
  if (processes.rank == 0) ensure_data(first);
  std::vector<pid_t> children;
  if (args.processes > 1 && !env(kChildVariable)) {
    TANDEM_CHECK(!processes.multi_process(), ErrorCode::kInvalidArgument,
                 "scaling: --processes {} starts processes here, but {} started {} already: drop --processes",
                 args.processes, processes.source, processes.size);
    children = launch_local_processes(args.processes, out);
    processes = distribute::resolve_process_group(request, env);
  }
  Baseline base = baseline_for(args);
  std::vector<ScalingRow> rows;
  for (size_t i = 0; i < args.replicas.size(); ++i) {
    distribute::ProcessGroupSpec row = processes;
    row.port += static_cast<int>(i);  // each run its own rendezvous: no process joins the last one's
    rows.push_back(run_one(args, base, args.replicas[i], out, row));
  }
  wait_local_processes(children, out);
  if (processes.rank != 0) return 0;
  fill_efficiency(rows);
  std::string table = scaling_markdown(rows, args.mode);
  std::cout << "\n" << table << std::flush;
  write_text(out / "scaling.md", fmt::format("# Scaling: {}, {} steps per run\n\n{}", args.config, args.steps, table));
  write_text(out / "scaling.csv", scaling_csv(rows));
  write_text(out / "scaling.svg", scaling_svg(rows, fmt::format("{} scaling: {}", args.mode, args.config)));
  spdlog::info("scaling: scaling.md, scaling.csv and scaling.svg in {}", out.string());
  return 0;
}

}  // namespace

void add_scaling_verb(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ScalingArgs>();
  CLI::App* verb = app.add_subcommand("scaling", "Measure throughput and efficiency across replica counts");
  verb->add_option("--config", args->config, "The run's YAML config")->required();
  verb->add_option("--replicas", args->replicas, "Replica counts, e.g. 1,2,4,8")->required()->delimiter(',');
  verb->add_option("--mode", args->mode, "strong: fixed global batch; weak: fixed per-replica batch")
      ->check(CLI::IsMember({"strong", "weak"}));
  verb->add_option("--steps", args->steps, "Training steps per replica count (default 30)");
  verb->add_option("--set", args->overrides, "Override a config key (repeatable)");
  verb->add_option("--out", args->out, "Output directory (default: runs/<config name>-<time>)");
  verb->add_option("--processes", args->processes,
                   "Processes to start here, each with the replica counts above (default 1; under mpirun, srun or "
                   "RANK/WORLD_SIZE the launcher's)");
  verb->callback([&exit_code, args] { exit_code = run_scaling(*args); });
}

}  // namespace tandem::tools
