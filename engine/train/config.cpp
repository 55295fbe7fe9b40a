// The YAML readers of TrainConfig's sections: one key table per section, so every key is
// known, typed and bounded, and errors name the key path and line.
#include "engine/train/config.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "engine/core/suggest.h"

namespace tandem::train {

using yaml::as_bool;
using yaml::as_int;
using yaml::as_number;
using yaml::as_string;
using yaml::Keys;
using yaml::walk;

namespace {

constexpr double kMax = std::numeric_limits<double>::max();

std::string one_of(const YAML::Node& n, const std::string& p, const std::vector<std::string>& allowed) {
  std::string v = as_string(n, p);
  for (const auto& a : allowed) {
    if (v == a) return v;
  }
  throw_error(ErrorCode::kInvalidArgument, "{}: '{}' is not one of {}{}", yaml::where(n, p), v,
              fmt::join(allowed, ", "), did_you_mean(v, allowed));
}

float as_float(const YAML::Node& n, const std::string& p, double min, double max) {
  return static_cast<float>(as_number(n, p, min, max));
}

// A batch is allocated whole: a size no machine holds is a config error here, not std::bad_alloc
// later (with record counting off nothing else would stop it first).
int64_t as_batch_size(const YAML::Node& n, const std::string& p) {
  constexpr int64_t kMaxBatch = int64_t{1} << 24;
  const int64_t v = as_int(n, p, 1);
  TANDEM_CHECK(v <= kMaxBatch, ErrorCode::kInvalidArgument,
               "{}: {} examples in one batch is more than the {} this accepts; a batch is held in memory whole",
               yaml::where(n, p), v, kMaxBatch);
  return v;
}

// devices: all | N | [0, 1] | cpu:N, kept as text ("all", "2", "[0,1]", "cpu:2") for the strategy.
std::string devices_text(const YAML::Node& n, const std::string& p) {
  if (n.IsSequence()) {
    std::vector<int64_t> ids = yaml::as_ints(n, p, 0);
    TANDEM_CHECK(!ids.empty(), ErrorCode::kInvalidArgument, "{}: the list of devices is empty", yaml::where(n, p));
    for (size_t i = 1; i < ids.size(); ++i) {
      TANDEM_CHECK(std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(i), ids[i]) ==
                       ids.begin() + static_cast<std::ptrdiff_t>(i),
                   ErrorCode::kInvalidArgument, "{}: GPU {} is listed twice; one replica per GPU, so list each once",
                   yaml::where(n, p), ids[i]);
    }
    return fmt::format("[{}]", fmt::join(ids, ","));
  }
  std::string v = as_string(n, p);
  if (v == "all") return v;
  // A count in [1, max], read without std::stoi (whose out_of_range once reached the user as "stoi").
  auto count_in = [](std::string_view text, int64_t max) {
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    return ec == std::errc() && end == text.data() + text.size() && value >= 1 && value <= max;
  };
  if (v.starts_with("cpu:")) {
    TANDEM_CHECK(count_in(std::string_view(v).substr(4), 1024), ErrorCode::kInvalidArgument,
                 "{}: '{}': cpu:N needs a replica count from 1 to 1024", yaml::where(n, p), v);
    return v;
  }
  TANDEM_CHECK(count_in(v, 64), ErrorCode::kInvalidArgument,
               "{}: '{}': use all, a GPU count from 1 to 64, a list such as [0, 1], or cpu:N", yaml::where(n, p), v);
  return v;
}

// Model sizes: far above any model trained here, and far below what overflows a tensor's element
// count or an int (2^62 once wrapped a shape's count and wrote past a small allocation).
constexpr int64_t kMaxWidth = int64_t{1} << 24;  // classes, features, vocabulary, context
constexpr int64_t kMaxSide = 65535;              // image sides, patch sides, channels in
constexpr int64_t kMaxLayers = 4096;             // layers, heads
int64_t as_dim(const YAML::Node& n, const std::string& p, int64_t min, int64_t max) {
  return yaml::as_int_in(n, p, min, max);
}
std::vector<int64_t> as_dims(const YAML::Node& n, const std::string& p, int64_t max) {
  std::vector<int64_t> out = yaml::as_ints(n, p, 1);
  for (size_t i = 0; i < out.size(); ++i) as_dim(n[i], fmt::format("{}[{}]", p, i), 1, max);
  return out;
}

Keys model_keys(ModelConfig& m) {
  return {
      {"name", [&](auto& n, auto& p) { m.name = as_string(n, p); }},
      {"num_classes", [&](auto& n, auto& p) { m.num_classes = as_dim(n, p, 2, kMaxWidth); }},
      {"in_channels", [&](auto& n, auto& p) { m.in_channels = as_dim(n, p, 1, kMaxSide); }},
      {"input_size", [&](auto& n, auto& p) { m.input_size = as_dim(n, p, 1, kMaxSide); }},
      {"hidden", [&](auto& n, auto& p) { m.hidden = as_dims(n, p, kMaxWidth); }},
      {"channels_last", [&](auto& n, auto& p) { m.channels_last = as_bool(n, p); }},
      // vit (torchvision's names; image_size is input_size)
      {"image_size", [&](auto& n, auto& p) { m.input_size = as_dim(n, p, 1, kMaxSide); }},
      {"patch_size", [&](auto& n, auto& p) { m.patch_size = as_dim(n, p, 1, kMaxSide); }},
      {"num_layers", [&](auto& n, auto& p) { m.num_layers = as_dim(n, p, 1, kMaxLayers); }},
      {"num_heads", [&](auto& n, auto& p) { m.num_heads = as_dim(n, p, 1, kMaxLayers); }},
      {"hidden_dim", [&](auto& n, auto& p) { m.hidden_dim = as_dim(n, p, 1, kMaxWidth); }},
      {"mlp_dim", [&](auto& n, auto& p) { m.mlp_dim = as_dim(n, p, 1, kMaxWidth); }},
      {"attention_dropout", [&](auto& n, auto& p) { m.attention_dropout = as_float(n, p, 0.0, 0.999); }},
      // gpt (nanoGPT's GPTConfig)
      {"block_size", [&](auto& n, auto& p) { m.block_size = as_dim(n, p, 1, kMaxWidth); }},
      {"vocab_size", [&](auto& n, auto& p) { m.vocab_size = as_dim(n, p, 1, kMaxWidth); }},
      {"n_layer", [&](auto& n, auto& p) { m.n_layer = as_dim(n, p, 1, kMaxLayers); }},
      {"n_head", [&](auto& n, auto& p) { m.n_head = as_dim(n, p, 1, kMaxLayers); }},
      {"n_embd", [&](auto& n, auto& p) { m.n_embd = as_dim(n, p, 1, kMaxWidth); }},
      {"bias", [&](auto& n, auto& p) { m.bias = as_bool(n, p); }},
      {"dropout", [&](auto& n, auto& p) { m.dropout = as_float(n, p, 0.0, 0.999); }},
  };
}

// The built-in models each take their family's keys only: a GPT key on a ResNet is a mistake
// (a registered model of the program's own may read any field).
void check_model_family(const YAML::Node& n, const std::string& p, const ModelConfig& m) {
  static const std::vector<std::string> vit = {"patch_size", "num_layers", "num_heads", "hidden_dim",
                                                "mlp_dim", "attention_dropout", "image_size"};
  static const std::vector<std::string> gpt = {"block_size", "vocab_size", "n_layer", "n_head", "n_embd", "bias"};
  auto has = [](const std::vector<std::string>& keys, const std::string& k) {
    return std::find(keys.begin(), keys.end(), k) != keys.end();
  };
  const bool is_vit = m.name == "vit", is_gpt = m.name == "gpt";
  const bool built_in = is_vit || is_gpt || m.name == "mlp" || m.name == "small_cnn" || m.name.starts_with("resnet");
  if (!built_in) return;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    const bool wrong = (has(vit, key) && !is_vit) || (has(gpt, key) && !is_gpt) ||
                       (key == "dropout" && !is_vit && !is_gpt) || (key == "hidden" && m.name != "mlp");
    TANDEM_CHECK(!wrong, ErrorCode::kInvalidArgument, "{}: not a key of model '{}' ({} takes it)",
                 yaml::where(it->second, p + "." + key), m.name,
                 has(vit, key) ? "vit" : has(gpt, key) ? "gpt" : key == "hidden" ? "mlp" : "vit and gpt");
  }
  const bool both = n["image_size"] && n["input_size"];
  TANDEM_CHECK(!both || n["image_size"].as<int64_t>() == n["input_size"].as<int64_t>(), ErrorCode::kInvalidArgument,
               "{}: image_size and input_size name the same value (vit says image_size); give one",
               yaml::where(n["image_size"], p + ".image_size"));
}

Keys loop_keys(LoopConfig& l) {
  return {
      {"global_batch_size", [&](auto& n, auto& p) { l.global_batch_size = as_batch_size(n, p); }},
      {"per_replica_batch_size", [&](auto& n, auto& p) { l.per_replica_batch_size = as_batch_size(n, p); }},
      {"epochs", [&](auto& n, auto& p) { l.epochs = as_int(n, p, 1); }},
      {"steps", [&](auto& n, auto& p) { l.steps = as_int(n, p, 0); }},
      {"eval_every_steps", [&](auto& n, auto& p) { l.eval_every_steps = as_int(n, p, 0); }},
      {"log_every_steps", [&](auto& n, auto& p) { l.log_every_steps = as_int(n, p, 1); }},
      {"label_smoothing", [&](auto& n, auto& p) { l.label_smoothing = as_float(n, p, 0.0, 0.999); }},
      {"clip_grad_norm", [&](auto& n, auto& p) { l.clip_grad_norm = as_number(n, p, 0.0, kMax); }},
      {"warmup_steps_for_timing", [&](auto& n, auto& p) { l.warmup_steps_for_timing = as_int(n, p, 0); }},
      {"on_nan_loss", [&](auto& n, auto& p) { l.on_nan_loss = one_of(n, p, {"fail", "warn"}); }},
      {"grad_accumulation_steps", [&](auto& n, auto& p) { l.grad_accumulation_steps = as_int(n, p, 1); }},
  };
}

Keys optimizer_keys(optim::OptimizerOptions& o) {
  return {
      {"name", [&](auto& n, auto& p) { o.name = one_of(n, p, {"sgd", "adamw"}); }},
      {"lr", [&](auto& n, auto& p) { o.lr = as_float(n, p, 0.0, kMax); }},
      {"weight_decay", [&](auto& n, auto& p) { o.weight_decay = as_float(n, p, 0.0, kMax); }},
      {"exclude_norm_and_bias_from_weight_decay",
       [&](auto& n, auto& p) { o.exclude_norm_and_bias_from_weight_decay = as_bool(n, p); }},
      {"momentum", [&](auto& n, auto& p) { o.momentum = as_float(n, p, 0.0, 1.0); }},
      {"dampening", [&](auto& n, auto& p) { o.dampening = as_float(n, p, 0.0, 1.0); }},
      {"nesterov", [&](auto& n, auto& p) { o.nesterov = as_bool(n, p); }},
      {"beta1", [&](auto& n, auto& p) { o.beta1 = as_float(n, p, 0.0, 0.999999); }},
      {"beta2", [&](auto& n, auto& p) { o.beta2 = as_float(n, p, 0.0, 0.999999); }},
      {"eps", [&](auto& n, auto& p) { o.eps = as_float(n, p, 1e-30, 1.0); }},
  };
}

Keys schedule_keys(optim::ScheduleOptions& s) {
  return {
      {"name", [&](auto& n, auto& p) { s.name = one_of(n, p, {"constant", "step", "multistep", "cosine", "polynomial"}); }},
      {"warmup_steps", [&](auto& n, auto& p) { s.warmup_steps = as_int(n, p, 0); }},
      {"warmup_start_factor", [&](auto& n, auto& p) { s.warmup_start_factor = as_float(n, p, 0.0, 1.0); }},
      {"step_size", [&](auto& n, auto& p) { s.step_size = as_int(n, p, 1); }},
      {"milestones", [&](auto& n, auto& p) { s.milestones = yaml::as_ints(n, p, 1); }},
      {"gamma", [&](auto& n, auto& p) { s.gamma = as_float(n, p, 0.0, 1.0); }},
      {"min_lr", [&](auto& n, auto& p) { s.min_lr = as_float(n, p, 0.0, kMax); }},
      {"power", [&](auto& n, auto& p) { s.power = as_float(n, p, 0.0, kMax); }},
      {"scale_lr_with_batch", [&](auto& n, auto& p) { s.scale_lr_with_batch = as_bool(n, p); }},
      {"reference_batch_size", [&](auto& n, auto& p) { s.reference_batch_size = as_int(n, p, 1); }},
  };
}

Keys checkpoint_keys(CheckpointConfig& c) {
  return {
      {"dir", [&](auto& n, auto& p) { c.dir = as_string(n, p); }},
      {"every_steps", [&](auto& n, auto& p) { c.every_steps = as_int(n, p, 0); }},
      // 0 keeps all; an int in the manager, so bounded here rather than wrapped
      {"keep_last", [&](auto& n, auto& p) { c.keep_last = yaml::as_int_in(n, p, 0, 1 << 20); }},
      {"resume", [&](auto& n, auto& p) { c.resume = as_string(n, p); }},
  };
}

Keys distribute_keys(DistributeConfig& d) {
  return {
      {"sync_batchnorm", [&](auto& n, auto& p) { d.sync_batchnorm = as_bool(n, p); }},
      {"first_bucket_mb", [&](auto& n, auto& p) { d.first_bucket_mb = as_number(n, p, 0.001, 4096.0); }},
      {"bucket_cap_mb", [&](auto& n, auto& p) { d.bucket_cap_mb = as_number(n, p, 0.001, 4096.0); }},
      {"allreduce_dtype", [&](auto& n, auto& p) { d.allreduce_dtype = one_of(n, p, {"fp32", "bf16"}); }},
      {"watchdog_timeout_s", [&](auto& n, auto& p) { d.watchdog_timeout_s = as_number(n, p, 0.1, 86400.0); }},
      {"checksum_every_steps", [&](auto& n, auto& p) { d.checksum_every_steps = as_int(n, p, 0); }},
      {"processes", [&](auto& n, auto& p) { d.processes = as_int(n, p, 0); }},
      {"process_rank", [&](auto& n, auto& p) { d.process_rank = as_int(n, p, 0); }},
      {"address", [&](auto& n, auto& p) { d.address = as_string(n, p); }},
      {"port", [&](auto& n, auto& p) { d.port = as_int(n, p, 0); }},
      {"token", [&](auto& n, auto& p) { d.token = as_string(n, p); }},
      {"run_id", [&](auto& n, auto& p) { d.run_id = as_string(n, p); }},
  };
}

Keys output_keys(OutputConfig& o) {
  return {
      {"run_dir", [&](auto& n, auto& p) { o.run_dir = as_string(n, p); }},
      {"tensorboard", [&](auto& n, auto& p) { o.tensorboard = as_bool(n, p); }},
      {"metrics_csv", [&](auto& n, auto& p) { o.metrics_csv = as_bool(n, p); }},
  };
}

Keys prepare_keys(PrepareConfig& c) {
  return {
      // The sources are the trainer tool's to know and check (tools/trainer/prepare_data.cpp): a
      // program reading a config through the engine alone only carries the name.
      {"source", [&](auto& n, auto& p) { c.source = as_string(n, p); }},
      {"output_dir", [&](auto& n, auto& p) { c.output_dir = as_string(n, p); }},
  };
}

}  // namespace

void add_train_keys(TrainConfig& c, Keys& keys) {
  keys["seed"] = [&](auto& n, auto& p) { c.seed = static_cast<uint64_t>(as_int(n, p, 0)); };
  keys["deterministic"] = [&](auto& n, auto& p) { c.deterministic = as_bool(n, p); };
  keys["precision"] = [&](auto& n, auto& p) { c.precision = one_of(n, p, {"fp32", "tf32", "bf16"}); };
  keys["cudnn_benchmark"] = [&](auto& n, auto& p) { c.cudnn_benchmark = as_bool(n, p); };
  keys["device"] = [&](auto& n, auto& p) { c.device.device = one_of(n, p, {"auto", "cpu", "cuda"}); };
  keys["devices"] = [&](auto& n, auto& p) { c.device.devices = devices_text(n, p); };
  keys["threads_per_replica"] = [&](auto& n, auto& p) {
    const int64_t v = as_int(n, p, 0);
    TANDEM_CHECK(v <= 1024, ErrorCode::kInvalidArgument, "{}: {} threads is more than the 1024 this accepts",
                 yaml::where(n, p), v);
    c.device.threads_per_replica = static_cast<int>(v);
  };
  keys["model"] = [&](auto& n, auto& p) {
    walk(n, p, model_keys(c.model));
    check_model_family(n, p, c.model);
  };
  keys["train"] = [&](auto& n, auto& p) { walk(n, p, loop_keys(c.loop)); };
  keys["optimizer"] = [&](auto& n, auto& p) { walk(n, p, optimizer_keys(c.optimizer)); };
  keys["schedule"] = [&](auto& n, auto& p) { walk(n, p, schedule_keys(c.schedule)); };
  keys["checkpoint"] = [&](auto& n, auto& p) { walk(n, p, checkpoint_keys(c.checkpoint)); };
  keys["distribute"] = [&](auto& n, auto& p) { walk(n, p, distribute_keys(c.distribute)); };
  keys["output"] = [&](auto& n, auto& p) { walk(n, p, output_keys(c.output)); };
  keys["prepare"] = [&](auto& n, auto& p) { walk(n, p, prepare_keys(c.prepare)); };
}

ModelConfig model_config_from_text(const std::string& config_text) {
  YAML::Node root = YAML::Load(config_text);
  TANDEM_CHECK(root.IsMap() && root["model"], ErrorCode::kNotFound, "the config has no model section");
  ModelConfig m;
  walk(root["model"], "model", model_keys(m));
  return m;
}

void validate(const TrainConfig& c) {
  bool global = c.loop.global_batch_size > 0, per_replica = c.loop.per_replica_batch_size > 0;
  TANDEM_CHECK(global != per_replica, ErrorCode::kInvalidArgument,
               "train: give exactly one of global_batch_size or per_replica_batch_size (got {})",
               global ? "both" : "neither");
  TANDEM_CHECK(!c.optimizer.nesterov || c.optimizer.momentum > 0.0f, ErrorCode::kInvalidArgument,
               "optimizer.nesterov needs optimizer.momentum > 0 (got {})", c.optimizer.momentum);
  TANDEM_CHECK(c.schedule.name != "step" || c.schedule.step_size > 0, ErrorCode::kInvalidArgument,
               "schedule.step_size is required when schedule.name is step");
  TANDEM_CHECK(c.schedule.name != "multistep" || !c.schedule.milestones.empty(), ErrorCode::kInvalidArgument,
               "schedule.milestones is required when schedule.name is multistep");
  TANDEM_CHECK(std::is_sorted(c.schedule.milestones.begin(), c.schedule.milestones.end()),
               ErrorCode::kInvalidArgument, "schedule.milestones must be increasing, got [{}]",
               fmt::join(c.schedule.milestones, ", "));
  TANDEM_CHECK(c.checkpoint.resume == "none" || c.checkpoint.resume == "auto" || !c.checkpoint.resume.empty(),
               ErrorCode::kInvalidArgument, "checkpoint.resume: use none, auto or a checkpoint directory");
}

distribute::ReplicaPlanRequest plan_request(const TrainConfig& c) {
  distribute::ReplicaPlanRequest request;
  request.device = c.device.device;
  request.devices = c.device.devices;
  request.threads_per_replica = c.device.threads_per_replica;
  request.global_batch_size = c.loop.global_batch_size;
  request.per_replica_batch_size = c.loop.per_replica_batch_size;
  return request;
}

distribute::ProcessGroupRequest process_group_request(const TrainConfig& c) {
  const DistributeConfig& d = c.distribute;
  return {.processes = static_cast<int>(d.processes), .process_rank = static_cast<int>(d.process_rank),
          .address = d.address, .port = static_cast<int>(d.port), .token = d.token, .run_id = d.run_id};
}

}  // namespace tandem::train

namespace tandem::train {

std::chrono::milliseconds watchdog_timeout(const TrainConfig& config) {
  return std::chrono::milliseconds(static_cast<int64_t>(config.distribute.watchdog_timeout_s * 1000));
}

KernelOptions kernel_options(const TrainConfig& config) {
  KernelOptions o;
  o.deterministic = config.deterministic;
  o.cudnn_benchmark = config.cudnn_benchmark;
  o.precision = parse_precision(config.precision);
  return o;
}

}  // namespace tandem::train
