// `trainer scaling --config FILE --replicas 1,2,4,8 [--mode strong|weak] [--steps N]`: trains
// the same config briefly at each replica count (no evaluation, TensorBoard or CSV) and reports
// throughput, step times, the step-time breakdown and efficiency as markdown, CSV and SVG.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>

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

// The config for one replica count: the fixed batch, a short run, and nothing but training.
RunConfig config_for(const ScalingArgs& args, const Baseline& base, int replicas, const std::filesystem::path& dir) {
  RunConfig config = load_run_config(args.config, args.overrides);
  train::TrainConfig& c = config.train;
  c.device.device = base.cpu ? "cpu" : "cuda";
  c.device.devices = base.cpu ? fmt::format("cpu:{}", replicas) : gpu_list(replicas);
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

ScalingRow run_one(const ScalingArgs& args, const Baseline& base, int replicas, const std::filesystem::path& out) {
  std::filesystem::path dir = out / fmt::format("replicas-{}", replicas);
  std::filesystem::create_directories(dir);
  RunConfig config = config_for(args, base, replicas, dir);
  distribute::ReplicaPlan plan = plan_for(config.train);
  spdlog::info("scaling ({}): {}", args.mode, plan.describe());
  train::Trainer trainer(make_trainer_setup(config, plan, dir));
  train::RunSummary s = trainer.run();
  ScalingRow row{.replicas = s.replicas, .global_batch = s.global_batch_size,
                 .per_replica_batch = s.per_replica_batch_size, .images_per_sec = s.images_per_sec,
                 .step_p50_ms = s.step_time_p50_ms, .step_p95_ms = s.step_time_p95_ms, .breakdown = s.breakdown};
  spdlog::info("scaling: {} replicas, {:.1f} images/s, step p50 {:.1f} ms; {}", replicas, s.images_per_sec,
               s.step_time_p50_ms, s.breakdown.describe(s.timed_steps));
  return row;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream file(path);
  file << text;
  TANDEM_CHECK(file.good(), ErrorCode::kInternal, "scaling: cannot write {}", path.string());
}

int run_scaling(const ScalingArgs& args) {
  TANDEM_CHECK(args.mode == "strong" || args.mode == "weak", ErrorCode::kInvalidArgument,
               "scaling: --mode must be strong or weak, not '{}'", args.mode);
  for (int r : args.replicas) {
    TANDEM_CHECK(r >= 1, ErrorCode::kInvalidArgument, "scaling: replica count {} is not positive", r);
  }
  std::filesystem::path out = make_run_dir(args.config, args.out, "runs");
  RunConfig first = load_run_config(args.config, args.overrides);
  TANDEM_CHECK(args.steps > first.train.loop.warmup_steps_for_timing, ErrorCode::kInvalidArgument,
               "scaling: --steps {} leaves no timed steps after the {} warm-up steps", args.steps,
               first.train.loop.warmup_steps_for_timing);
  ensure_data(first);
  Baseline base = baseline_for(args);
  std::vector<ScalingRow> rows;
  for (int r : args.replicas) rows.push_back(run_one(args, base, r, out));
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
  verb->callback([&exit_code, args] { exit_code = run_scaling(*args); });
}

}  // namespace tandem::tools
