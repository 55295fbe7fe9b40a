// `trainer predict --checkpoint DIR --input PATH... [--top-k K] [--json] [--logits] [--device cpu|cuda]
// [--batch-size N]`: classifies images (JPEG or PNG files, folders of them, TFRecord files) with an
// image classifier's checkpoint, preprocessed as its run's evaluation data (predict_inputs.h), and
// prints each input's top-k classes with their softmax probabilities, as text or JSON Lines.
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <span>

#include "engine/autograd/variable.h"
#include "engine/core/context.h"
#include "engine/train/checkpoint/checkpoint.h"
#include "models/registry.h"
#include "tools/trainer/predict_inputs.h"
#include "tools/trainer/run_config.h"
#include "tools/trainer/verb_device.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {
namespace {

namespace fs = std::filesystem;

struct PredictArgs {
  std::string checkpoint, device = "cpu";
  std::vector<std::string> inputs;
  int64_t top_k = 5;
  bool top_k_given = false;  // the default 5 is cut to the class count silently; a given K is warned about
  int64_t batch_size = 32;
  bool json = false;
  bool logits = false;
};

// A run's folder of checkpoints given for one of them: say which to give instead.
void check_is_one_checkpoint(const fs::path& dir) {
  TANDEM_CHECK(fs::is_directory(dir), ErrorCode::kNotFound,
               "predict: checkpoint {} {}; give one checkpoint directory, RUN/checkpoints/step-...", dir.string(),
               fs::exists(dir) ? "is not a directory" : "does not exist");
  if (fs::exists(dir / train::CheckpointManager::kMetaFile)) return;
  std::vector<std::string> steps;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (train::parse_step_directory_name(entry.path().filename().string())) steps.push_back(entry.path().string());
  }
  std::sort(steps.begin(), steps.end());
  TANDEM_CHECK(steps.empty(), ErrorCode::kInvalidArgument,
               "predict: {} is a folder of {} checkpoint(s), not one checkpoint; give one of them, e.g. "
               "--checkpoint {}",
               dir.string(), steps.size(), steps.back());
  throw_error(ErrorCode::kNotFound,
              "predict: {} is not a checkpoint (it has no {}); give one checkpoint directory, RUN/checkpoints/step-...",
              dir.string(), train::CheckpointManager::kMetaFile);
}

// The run's config as the checkpoint keeps it; a language model is refused before anything is read.
RunConfig checkpoint_run_config(const fs::path& dir, const train::CheckpointMeta& meta) {
  const train::ModelConfig model = train::model_config_from_text(meta.config);
  TANDEM_CHECK(model.name != "gpt", ErrorCode::kInvalidArgument,
               "predict: checkpoint {} holds a '{}' language model, which reads token windows, not images; continue a "
               "text with it: trainer generate --checkpoint {}",
               dir.string(), model.name, dir.string());
  return run_config_from_text(meta.config, (dir / train::CheckpointManager::kMetaFile).string());
}

Preprocessing preprocessing_for(const RunConfig& config) {
  const bool held_out = config.eval_data.has_value();
  if (!held_out) {
    spdlog::warn("predict: the run's config has no eval_data section, so inputs get its data section's "
                 "preprocessing (data.image) without the random crop and flip");
  }
  const data::PipelineConfig& section = config.eval_data.value_or(config.data);
  TANDEM_CHECK(!section.tokens, ErrorCode::kInvalidArgument,
               "predict: the run's {} holds token windows, not images; continue a text with `trainer generate`",
               held_out ? "eval_data" : "data");
  return make_preprocessing(section, held_out ? "eval_data" : "data", config.train.model);
}

std::vector<double> softmax(std::span<const float> logits) {
  const float top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(static_cast<double>(logits[i]) - top);
  for (double& v : p) v /= sum;
  return p;
}

// The k most probable classes, most probable first, ties by class index; NaN last.
std::vector<int64_t> top_classes(const std::vector<double>& p, int64_t k) {
  std::vector<int64_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](int64_t i) { return std::isnan(p[static_cast<size_t>(i)]) ? -1.0 : p[static_cast<size_t>(i)]; };
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
  order.resize(static_cast<size_t>(k));
  return order;
}

void print_item(const PredictArgs& args, const PredictItem& item, std::span<const float> logits, int64_t k) {
  const std::vector<double> p = softmax(logits);
  const std::vector<int64_t> top = top_classes(p, k);
  if (args.json) {
    nlohmann::ordered_json line = {{"input", item.path}};  // fields in the order a reader looks for them
    if (item.record >= 0) line["record"] = item.record;
    if (item.label) line["label"] = *item.label;
    nlohmann::ordered_json classes = nlohmann::ordered_json::array();
    for (int64_t c : top) classes.push_back({{"class", c}, {"probability", p[static_cast<size_t>(c)]}});
    line["top_k"] = std::move(classes);
    if (args.logits) line["logits"] = std::vector<float>(logits.begin(), logits.end());
    // A path need not be UTF-8: its odd bytes are replaced rather than failing the whole run.
    std::puts(line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    return;
  }
  std::string text = item.path;
  if (item.record >= 0) text += fmt::format(" record {}", item.record);
  if (item.label) text += fmt::format(" (label {})", *item.label);
  text += ":";
  for (size_t i = 0; i < top.size(); ++i) {
    text += fmt::format("{} {} ({:.4f})", i == 0 ? "" : ",", top[i], p[static_cast<size_t>(top[i])]);
  }
  if (args.logits) text += fmt::format("; logits {}", fmt::join(logits, " "));
  std::puts(text.c_str());
}

// One batch through the model; its logits come back to the host.
std::vector<float> forward(ExecutionContext& ctx, nn::Module& model, const std::vector<PredictItem>& items,
                           bool channels_last) {
  Tensor x = stack_images(items, channels_last).to(ctx.device());
  autograd::NoGradGuard no_grad;
  autograd::Variable logits = model.forward(ctx, autograd::Variable(x));
  const Tensor& y = logits.value();
  TANDEM_CHECK(y.rank() == 2 && y.dim(0) == static_cast<int64_t>(items.size()), ErrorCode::kInvalidArgument,
               "predict: the model gave {} for a batch of {} image(s); predict needs (N, classes) logits",
               y.describe(), items.size());
  return y.to_vector();
}

int run_predict(const PredictArgs& args) {
  const fs::path dir = args.checkpoint;
  check_is_one_checkpoint(dir);
  const train::CheckpointMeta stored = train::validate_checkpoint(dir);
  const RunConfig config = checkpoint_run_config(dir, stored);
  Preprocessing preprocessing = preprocessing_for(config);
  // Every input is found and told apart before the weights are read: a typo fails at once.
  std::vector<PredictInput> inputs = expand_predict_inputs(args.inputs);
  const Device device = verb_device("predict", args.device);
  const train::ModelConfig& spec = config.train.model;
  auto model = models::create_model(spec);
  const train::CheckpointMeta meta = train::CheckpointManager::load(dir, *model, nullptr);
  model->to(device);
  model->eval();
  const int64_t k = std::min(args.top_k, spec.num_classes);
  if (k < args.top_k && args.top_k_given) {
    spdlog::warn("predict: --top-k {} is more than the model's {} classes; printing {}", args.top_k,
                 spec.num_classes, k);
  }
  spdlog::info("predict: checkpoint {} (step {}), model {} ({} classes) on {}; {}", dir.string(), meta.step, spec.name,
               spec.num_classes, device.str(), describe_preprocessing(preprocessing));
  ExecutionContext ctx(device, 0, config.train.seed);
  ctx.bind();
  PredictReader reader(std::move(inputs), std::move(preprocessing));
  for (;;) {
    const std::vector<PredictItem> items = reader.next(static_cast<size_t>(args.batch_size));
    if (items.empty()) break;
    const std::vector<float> logits = forward(ctx, *model, items, spec.channels_last);
    const size_t classes = logits.size() / items.size();
    for (size_t i = 0; i < items.size(); ++i) {
      print_item(args, items[i], std::span<const float>(logits).subspan(i * classes, classes),
                 std::min<int64_t>(k, static_cast<int64_t>(classes)));
    }
    std::fflush(stdout);  // a long run shows its results batch by batch, also through a pipe
  }
  return 0;
}

}  // namespace

void add_predict_verb(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<PredictArgs>();
  CLI::App* verb = app.add_subcommand("predict", "Classify images (JPEG, PNG, folders, TFRecords) with a checkpoint");
  verb->add_option("--checkpoint", args->checkpoint, "A checkpoint directory (RUN/checkpoints/step-...)")->required();
  verb->add_option("--input", args->inputs, "JPEG or PNG files, folders of them, or TFRecord files (repeatable)")
      ->required();
  CLI::Option* top_k =
      verb->add_option("--top-k", args->top_k, "How many of the most probable classes to print per input")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
          ->capture_default_str();
  verb->add_option("--batch-size", args->batch_size, "Inputs per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16))
      ->capture_default_str();
  verb->add_option("--device", args->device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  verb->add_flag("--json", args->json, "Print one JSON object per input (JSON Lines)");
  verb->add_flag("--logits", args->logits, "Also print each input's raw logits");
  verb->callback([&exit_code, args, top_k] {
    args->top_k_given = top_k->count() > 0;
    exit_code = run_predict(*args);
  });
}

}  // namespace tandem::tools
