// `trainer eval --config FILE --checkpoint PATH [--json]`: evaluates a checkpoint on the
// config's evaluation data (eval_data, else data) on one CPU replica, and prints the metrics.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/train/checkpoint/checkpoint.h"
#include "engine/train/classification_task.h"
#include "engine/train/evaluation.h"
#include "models/registry.h"
#include "tools/trainer/prepare_data.h"
#include "tools/trainer/train_setup.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {
namespace {

struct EvalArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string checkpoint;
  bool json = false;
};

int run_eval(const EvalArgs& args) {
  RunConfig config = load_run_config(args.config, args.overrides);
  ensure_data(config);
  const train::TrainConfig& c = config.train;
  distribute::ReplicaPlan plan = distribute::plan_replicas(
      {.device = "cpu", .devices = "cpu:1", .global_batch_size = c.loop.global_batch_size > 0
                                                                     ? c.loop.global_batch_size
                                                                     : c.loop.per_replica_batch_size});
  auto model = models::create_model({c.model.name, c.model.num_classes, c.model.in_channels, c.model.input_size,
                                     c.model.hidden});
  train::CheckpointMeta meta = train::CheckpointManager::load(args.checkpoint, *model, nullptr);
  auto sources = make_sources(config.eval_data.value_or(config.data), plan, c, true, nullptr);
  ExecutionContext ctx(Device::cpu(), plan.threads_per_replica, c.seed);
  train::ImageClassification task(c.model, c.loop.label_smoothing);
  train::EvalSums e = train::evaluate_pass(ctx, *model, *sources.front(), task);
  TANDEM_CHECK(e.examples > 0, ErrorCode::kFailedPrecondition, "eval: the evaluation data yielded no examples");
  struct {
    double loss, top1, top5, examples;
  } s{e.sums[0], e.sums[1], e.sums[2], e.examples};
  nlohmann::json out = {{"checkpoint", args.checkpoint}, {"step", meta.step},
                        {"examples", static_cast<int64_t>(s.examples)}, {"loss", s.loss / s.examples},
                        {"top1", s.top1 / s.examples}, {"top5", s.top5 / s.examples}};
  if (args.json) {
    std::puts(out.dump(2).c_str());
  } else {
    std::printf("checkpoint %s (step %lld): loss %.4f, top-1 %.2f%%, top-5 %.2f%% on %lld examples\n",
                args.checkpoint.c_str(), static_cast<long long>(meta.step), s.loss / s.examples,
                100 * s.top1 / s.examples, 100 * s.top5 / s.examples, static_cast<long long>(s.examples));
  }
  return 0;
}

}  // namespace

void add_eval_verb(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* verb = app.add_subcommand("eval", "Evaluate a checkpoint on the config's evaluation data");
  verb->add_option("--config", args->config, "The run's YAML config")->required();
  verb->add_option("--checkpoint", args->checkpoint, "A checkpoint directory (RUN/checkpoints/step-...)")->required();
  verb->add_option("--set", args->overrides, "Override a config key (repeatable)");
  verb->add_flag("--json", args->json, "Print the metrics as one JSON document");
  verb->callback([&exit_code, args] { exit_code = run_eval(*args); });
}

}  // namespace tandem::tools
