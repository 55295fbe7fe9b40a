// `trainer eval --config FILE --checkpoint PATH [--json]`: evaluates a checkpoint on the
// config's evaluation data (eval_data, else data) on one CPU replica, and prints the metrics.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/train/checkpoint/checkpoint.h"
#include "engine/train/tasks.h"
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
  auto model = models::create_model(c.model);
  train::CheckpointMeta meta = train::CheckpointManager::load(args.checkpoint, *model, nullptr);
  // Without eval_data the figures are on the training set: said in every output, never implied.
  const bool held_out = config.eval_data.has_value();
  if (!held_out) {
    spdlog::warn("eval: the config has no eval_data section, so this evaluates the training data (data.files); "
                 "add an eval_data section for held-out figures");
  }
  auto sources = make_sources(config.eval_data.value_or(config.data), plan, c, true, nullptr);
  ExecutionContext ctx(Device::cpu(), plan.threads_per_replica, c.seed);
  std::shared_ptr<train::Task> task = train::make_task(c);
  train::EvalSums e = train::evaluate_pass(ctx, *model, *sources.front(), *task);
  TANDEM_CHECK(e.examples > 0, ErrorCode::kFailedPrecondition, "eval: the evaluation data yielded no examples");
  std::vector<double> means;
  for (double sum : e.sums) means.push_back(sum / e.examples);
  task->finish_eval(means);
  const std::vector<std::string> names = task->eval_metrics();
  nlohmann::json out = {{"checkpoint", args.checkpoint}, {"step", meta.step},
                        {"examples", static_cast<int64_t>(e.examples)}, {"data", held_out ? "eval_data" : "data"}};
  for (size_t i = 0; i < names.size(); ++i) out[names[i]] = means[i];
  if (args.json) {
    std::puts(out.dump(2).c_str());
  } else {
    std::printf("checkpoint %s (step %lld): %s on %lld examples%s\n", args.checkpoint.c_str(),
                static_cast<long long>(meta.step), task->describe_eval(means).c_str(),
                static_cast<long long>(e.examples), held_out ? "" : " of the training data (no eval_data)");
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
