// meta.json: CheckpointMeta to JSON and back. Reading checks every field's presence and type,
// because resume trusts these numbers to continue a run exactly.
#include "engine/train/checkpoint/meta.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <random>

#include "engine/core/error.h"
#include "engine/core/version.h"
#include "engine/train/checkpoint/json_brief.h"

namespace tandem::train {
namespace {

constexpr std::string_view kFormatName = "tandem-checkpoint";

class Reader {
 public:
  explicit Reader(const std::filesystem::path& source) : source_(source) {}

  [[noreturn]] void fail(std::string_view field, std::string_view what) const {
    throw_error(ErrorCode::kDataLoss, "checkpoint metadata '{}': \"{}\" {}", source_.string(), field, what);
  }
  const nlohmann::json& at(const nlohmann::json& j, std::string_view field, std::string_view path) const {
    auto it = j.find(field);
    if (it == j.end()) fail(path, "is missing");
    return *it;
  }
  int64_t int_at(const nlohmann::json& j, std::string_view field, std::string_view path) const {
    const auto& v = at(j, field, path);
    if (!v.is_number_integer()) fail(path, fmt::format("is {}, not an integer", json_brief(v)));
    return v.get<int64_t>();
  }
  uint64_t uint_at(const nlohmann::json& j, std::string_view field, std::string_view path) const {
    const auto& v = at(j, field, path);
    if (!v.is_number_unsigned()) fail(path, fmt::format("is {}, not a non-negative integer", json_brief(v)));
    return v.get<uint64_t>();
  }
  double number_at(const nlohmann::json& j, std::string_view field, std::string_view path) const {
    const auto& v = at(j, field, path);
    if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();  // JSON has no NaN
    if (!v.is_number()) fail(path, fmt::format("is {}, not a number", json_brief(v)));
    return v.get<double>();
  }
  std::string string_at(const nlohmann::json& j, std::string_view field, std::string_view path) const {
    const auto& v = at(j, field, path);
    if (!v.is_string()) fail(path, fmt::format("is {}, not a string", json_brief(v)));
    return v.get<std::string>();
  }
  const nlohmann::json& object_at(const nlohmann::json& j, std::string_view field, std::string_view path) const {
    const auto& v = at(j, field, path);
    if (!v.is_object()) fail(path, fmt::format("is {}, not an object", json_brief(v)));
    return v;
  }

 private:
  const std::filesystem::path& source_;
};

std::string utc_now_iso8601() {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  size_t n = std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return std::string(text, n);
}

ReplicaState replica_from_json(const Reader& r, const nlohmann::json& j, size_t i) {
  std::string path = fmt::format("replicas[{}]", i);
  if (!j.is_object()) r.fail(path, fmt::format("is {}, not an object", json_brief(j)));
  ReplicaState s;
  s.data_position = r.at(j, "data_position", path + ".data_position");
  const auto& rng = r.object_at(j, "rng", path + ".rng");
  s.rng.seed = r.uint_at(rng, "seed", path + ".rng.seed");
  s.rng.subsequence = r.uint_at(rng, "subsequence", path + ".rng.subsequence");
  s.rng.offset = r.uint_at(rng, "offset", path + ".rng.offset");
  return s;
}

}  // namespace

std::string tandem_version() { return std::string(version()); }

std::string new_run_id() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto nanos = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  std::random_device device;
  const uint64_t random = (static_cast<uint64_t>(device()) << 32) ^ device();
  return fmt::format("{:016x}{:016x}", nanos, random);
}

int64_t examples_into_epoch(const ReplicaState& state, int64_t fallback_global_batch) {
  const nlohmann::json& p = state.data_position;
  return p.value("batches", int64_t{0}) * p.value("global_batch", fallback_global_batch);
}

nlohmann::json replica_state_to_json(const ReplicaState& r) {
  return {{"data_position", r.data_position},
          {"rng", {{"seed", r.rng.seed}, {"subsequence", r.rng.subsequence}, {"offset", r.rng.offset}}}};
}

ReplicaState replica_state_from_json(const nlohmann::json& j, const std::string& where) {
  return replica_from_json(Reader{where}, j, 0);
}

nlohmann::json meta_to_json(const CheckpointMeta& meta) {
  nlohmann::json replicas = nlohmann::json::array();
  for (const auto& r : meta.replicas) replicas.push_back(replica_state_to_json(r));
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& [name, value] : meta.metrics) {
    metrics[name] = std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
  }
  nlohmann::json out = {{"format", kFormatName},
          {"format_version", CheckpointMeta::kFormatVersion},
          {"tandem_version", meta.tandem_version.empty() ? tandem_version() : meta.tandem_version},
          {"saved_at", meta.saved_at.empty() ? utc_now_iso8601() : meta.saved_at},
          {"step", meta.step},
          {"epoch", meta.epoch},
          {"optimizer", {{"name", meta.optimizer}, {"steps_taken", meta.optimizer_steps}, {"lr", meta.lr}}},
          {"replicas", std::move(replicas)},
          {"metrics", std::move(metrics)},
          {"evaluated_step", meta.evaluated_step},
          {"wall_time_s", meta.wall_time_s},
          {"lr_scale", meta.lr_scale},
          {"callbacks", meta.callbacks},
          {"config", meta.config}};
  if (!meta.run_id.empty()) out["run_id"] = meta.run_id;
  if (meta.interval_start >= 0) out["train_interval"] = {{"start", meta.interval_start}, {"sums", meta.interval_sums}};
  return out;
}

CheckpointMeta meta_from_json(const nlohmann::json& j, const std::filesystem::path& source) {
  Reader r(source);
  if (!j.is_object()) r.fail("(root)", "is not a JSON object");
  if (r.string_at(j, "format", "format") != kFormatName) r.fail("format", "is not \"tandem-checkpoint\"");
  CheckpointMeta m;
  m.format_version = static_cast<int>(r.int_at(j, "format_version", "format_version"));
  TANDEM_CHECK(m.format_version >= 1 && m.format_version <= CheckpointMeta::kFormatVersion,
               ErrorCode::kFailedPrecondition,
               "checkpoint metadata '{}' has format_version {}; this Tandem ({}) reads versions 1 to {}",
               source.string(), m.format_version, tandem_version(), CheckpointMeta::kFormatVersion);
  m.tandem_version = r.string_at(j, "tandem_version", "tandem_version");
  m.saved_at = r.string_at(j, "saved_at", "saved_at");
  m.step = r.int_at(j, "step", "step");
  m.epoch = r.int_at(j, "epoch", "epoch");
  const auto& opt = r.object_at(j, "optimizer", "optimizer");
  m.optimizer = r.string_at(opt, "name", "optimizer.name");
  m.optimizer_steps = r.int_at(opt, "steps_taken", "optimizer.steps_taken");
  m.lr = r.number_at(opt, "lr", "optimizer.lr");
  const auto& replicas = r.at(j, "replicas", "replicas");
  if (!replicas.is_array()) r.fail("replicas", "is not an array");
  for (size_t i = 0; i < replicas.size(); ++i) m.replicas.push_back(replica_from_json(r, replicas[i], i));
  const auto& metrics = r.object_at(j, "metrics", "metrics");
  for (const auto& [name, value] : metrics.items()) m.metrics[name] = r.number_at(metrics, name, "metrics." + name);
  m.wall_time_s = r.number_at(j, "wall_time_s", "wall_time_s");
  m.config = r.string_at(j, "config", "config");
  // Written since callbacks exist; older checkpoints have neither.
  if (j.contains("lr_scale")) m.lr_scale = r.number_at(j, "lr_scale", "lr_scale");
  if (j.contains("run_id")) m.run_id = r.string_at(j, "run_id", "run_id");  // written since 2026-12-05
  if (j.contains("evaluated_step")) m.evaluated_step = r.int_at(j, "evaluated_step", "evaluated_step");
  if (j.contains("train_interval")) {  // written since 2026-12-04
    const auto& interval = r.object_at(j, "train_interval", "train_interval");
    m.interval_start = r.int_at(interval, "start", "train_interval.start");
    const auto& sums = r.at(interval, "sums", "train_interval.sums");
    if (!sums.is_array()) r.fail("train_interval.sums", "is not an array");
    for (const auto& v : sums) {
      if (!v.is_number()) r.fail("train_interval.sums", "holds something that is not a number");
      m.interval_sums.push_back(v.get<double>());
    }
  }
  if (j.contains("callbacks")) {
    const auto& callbacks = r.object_at(j, "callbacks", "callbacks");
    for (const auto& [key, value] : callbacks.items()) m.callbacks[key] = r.string_at(callbacks, key, "callbacks." + key);
  }
  if (m.step < 0 || m.epoch < 0 || m.optimizer_steps < 0) {
    r.fail("step", "or epoch or optimizer.steps_taken is negative");
  }
  return m;
}

}  // namespace tandem::train
