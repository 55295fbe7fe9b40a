// `trainer bench-input --config FILE [--replicas N] [--seconds S] [--step-time-ms T] [--json]`:
// the configured input pipeline alone, per replica shard, to answer "is my input the bottleneck?".
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <memory>

#include "data/pipeline/pipeline_config.h"
#include "engine/core/yaml_walk.h"
#include "engine/distribute/replica_plan.h"
#include "engine/train/config.h"
#include "tools/trainer/bench_input_run.h"
#include "tools/trainer/run_config.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {
namespace {

// The data section as training would load it: a run config (one with a train section) sets the
// per-replica batch and the image layout from its train and model sections; a config of the data
// section alone keeps the data section's own batch size.
data::PipelineConfig bench_input_config(const std::string& path, int replicas) {
  if (!yaml::load_file(path)["train"]) return data::load_pipeline_config(path);
  RunConfig rc = load_run_config(path, {});
  distribute::ReplicaPlanRequest request = train::plan_request(rc.train);
  request.device = "cpu";
  request.devices = fmt::format("cpu:{}", replicas);
  const distribute::ReplicaPlan plan = distribute::plan_replicas(request);
  data::PipelineConfig config = rc.data;
  config.global_batch_size = 0;
  config.batch_size = plan.per_replica_batch_size;
  config.image.augment.layout = rc.train.model.channels_last ? data::ImageLayout::kNHWC : data::ImageLayout::kNCHW;
  if (config.seed == 0) config.seed = rc.train.seed;
  spdlog::info("bench-input: batches of {} per replica, as training with {} replica(s) would load them", config.batch_size,
               replicas);
  return config;
}

}  // namespace

void add_bench_input_verb(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<BenchInputArgs>();
  CLI::App* verb = app.add_subcommand(
      "bench-input", "Run the configured input pipeline alone and say whether it keeps the replicas fed");
  verb->add_option("--config", args->config, "YAML config; its 'data' section is used")->required()->check(
      CLI::ExistingFile);
  verb->add_option("--replicas", args->replicas, "Replicas to feed, each with its own shard (default 1)")
      ->check(CLI::Range(1, 64));
  verb->add_option("--seconds", args->seconds, "Seconds to measure after a 1 s warm-up (default 10)")
      ->check(finite_range(0.001, 1e6));
  verb->add_option("--step-time-ms", args->step_time_ms,
                   "A model's step time to check the input against (default: report the shortest it feeds)")
      ->check(finite_range(0, 1e7));
  verb->add_flag("--json", args->json, "Print the report as JSON");
  verb->callback([args, &exit_code] {
    data::PipelineConfig config = bench_input_config(args->config, args->replicas);
    if (args->json) spdlog::set_level(spdlog::level::warn);  // the plan goes into the JSON instead
    BenchInputReport report = run_bench_input(config, *args);
    fmt::print("{}", args->json ? render_bench_input_json(report, *args) : render_bench_input_text(report, *args));
    exit_code = 0;
  });
}

}  // namespace tandem::tools
