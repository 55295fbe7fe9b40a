// `trainer bench-input --config FILE [--replicas N] [--seconds S] [--step-time-ms T] [--json]`:
// the configured input pipeline alone, per replica shard, to answer "is my input the bottleneck?".
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <memory>

#include "data/pipeline/pipeline_config.h"
#include "tools/trainer/bench_input_run.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {

void add_bench_input_verb(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<BenchInputArgs>();
  CLI::App* verb = app.add_subcommand(
      "bench-input", "Run the configured input pipeline alone and say whether it keeps the replicas fed");
  verb->add_option("--config", args->config, "YAML config; its 'data' section is used")->required()->check(
      CLI::ExistingFile);
  verb->add_option("--replicas", args->replicas, "Replicas to feed, each with its own shard (default 1)")
      ->check(CLI::Range(1, 64));
  verb->add_option("--seconds", args->seconds, "Seconds to measure after a 1 s warm-up (default 10)")
      ->check(CLI::PositiveNumber);
  verb->add_option("--step-time-ms", args->step_time_ms,
                   "A model's step time to check the input against (default: report the shortest it feeds)")
      ->check(CLI::NonNegativeNumber);
  verb->add_flag("--json", args->json, "Print the report as JSON");
  verb->callback([args, &exit_code] {
    data::PipelineConfig config = data::load_pipeline_config(args->config);
    if (args->json) spdlog::set_level(spdlog::level::warn);  // the plan goes into the JSON instead
    BenchInputReport report = run_bench_input(config, *args);
    fmt::print("{}", args->json ? render_bench_input_json(report, *args) : render_bench_input_text(report, *args));
    exit_code = 0;
  });
}

}  // namespace tandem::tools
