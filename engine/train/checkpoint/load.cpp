// The read side of checkpoints: validating a directory (meta.json and both headers, cross-checked),
// restoring a model and an optimizer from it, and resolving a `resume:` setting.
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <optional>
#include <set>

#include "engine/train/checkpoint/checkpoint.h"
#include "engine/core/output_file.h"
#include "engine/train/checkpoint/fs.h"
#include "engine/train/checkpoint/posix.h"
#include "engine/train/checkpoint/json_brief.h"
#include "engine/train/checkpoint/safetensors.h"

namespace tandem::train {
namespace {

// The config inside meta.json can be long, but a meta.json this large is not ours.
constexpr uint64_t kMaxMetaBytes = 64ull << 20;

nlohmann::json read_meta_json(const std::filesystem::path& path) {
  std::string text = fs::read_file(path, kMaxMetaBytes);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_error(ErrorCode::kDataLoss, "checkpoint metadata '{}' is not valid JSON: {}", path.string(), e.what());
  }
}

// meta.json records each file's size and tensor count; a file that disagrees was replaced or cut.
void check_file_record(const std::filesystem::path& meta_path, const nlohmann::json& j, std::string_view name,
                       const SafetensorsHeader& header) {
  auto files = j.find("files");
  TANDEM_CHECK(files != j.end() && files->is_object() && files->contains(name), ErrorCode::kDataLoss,
               "checkpoint metadata '{}' has no \"files\".\"{}\" record", meta_path.string(), name);
  const auto& record = (*files)[std::string(name)];
  auto number = [&](const char* key) {
    auto it = record.is_object() ? record.find(key) : record.end();
    return it != record.end() && it->is_number_unsigned() ? std::optional<uint64_t>(it->get<uint64_t>()) : std::nullopt;
  };
  bool ok = number("bytes") == header.file_size && number("tensors") == header.entries.size();
  TANDEM_CHECK(ok, ErrorCode::kDataLoss, "checkpoint '{}': {} is {} bytes with {} tensors but meta.json recorded {}",
               meta_path.parent_path().string(), name, header.file_size, header.entries.size(), json_brief(record));
}

// Rethrows a load error with the file it came from, keeping its code.
template <typename F>
void with_source(const std::filesystem::path& file, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("checkpoint file '{}': {}", file.string(), e.what()));
  }
}

// The tensor files a checkpoint's meta.json lists: the model's and the optimizer's always, the
// replicas' buffers when saved.
std::vector<std::string_view> tensor_files(const nlohmann::json& meta) {
  std::vector<std::string_view> files{CheckpointManager::kModelFile, CheckpointManager::kOptimizerFile};
  auto listed = meta.find("files");
  if (listed != meta.end() && listed->is_object() && listed->contains(CheckpointManager::kReplicaBuffersFile)) {
    files.push_back(CheckpointManager::kReplicaBuffersFile);
  }
  return files;
}

// A folder of step-* checkpoints (RUN/checkpoints) given where one checkpoint is expected.
void reject_checkpoint_folder(const std::filesystem::path& path) {
  if (fs::exists(path / CheckpointManager::kMetaFile)) return;
  std::optional<int64_t> newest;
  for (const auto& child : fs::list_directory(path)) {
    auto step = parse_step_directory_name(child.filename().string());
    if (step && (!newest || *step > *newest)) newest = step;
  }
  TANDEM_CHECK(!newest, ErrorCode::kInvalidArgument,
               "'{}' is a directory of checkpoints, not one checkpoint; name one, such as '{}' (to resume the "
               "newest, set checkpoint.resume: auto)",
               path.string(), (path / step_directory_name(newest.value_or(0))).string());
}

// model.name in the config a checkpoint was saved with, or "" when it cannot be read.
std::string saved_model_name(const CheckpointMeta& meta) {
  try {
    YAML::Node config = YAML::Load(meta.config);
    if (config["model"] && config["model"]["name"]) return config["model"]["name"].as<std::string>();
  } catch (const std::exception&) {  // an old or foreign checkpoint: say nothing more
  }
  return "";
}

void load_optimizer(const std::filesystem::path& checkpoint, const CheckpointMeta& meta, optim::Optimizer& optimizer) {
  std::filesystem::path file = checkpoint / CheckpointManager::kOptimizerFile;
  TANDEM_CHECK(meta.optimizer == optimizer.options().name, ErrorCode::kInvalidArgument,
               "checkpoint '{}' holds {} optimizer state but the optimizer is {}", checkpoint.string(), meta.optimizer,
               optimizer.options().name);
  SafetensorsFile state = read_safetensors(file);
  // Saved before the first step: no state yet, and nothing to restore but the lr.
  if (!(state.tensors.empty() && meta.optimizer_steps == 0)) {
    with_source(file, [&] {
      for (const auto& [name, t] : state.tensors) {
        TANDEM_CHECK(t.dtype() == DType::kF32, ErrorCode::kInvalidArgument, "optimizer state '{}' is {}, not f32",
                     name, t.describe());
      }
      optimizer.load_state_dict(state.tensors, meta.optimizer_steps);
      TensorMap expected = optimizer.state_dict();
      for (const auto& [name, t] : state.tensors) {
        TANDEM_CHECK(expected.contains(name), ErrorCode::kInvalidArgument,
                     "optimizer state '{}' ({}) is in the checkpoint but matches no parameter of the optimizer", name,
                     t.describe());
      }
    });
  }
  optimizer.set_lr(static_cast<float>(meta.lr));
}

}  // namespace

void update_checkpoint_meta(const std::filesystem::path& checkpoint, const CheckpointMeta& meta) {
  const std::filesystem::path meta_path = checkpoint / CheckpointManager::kMetaFile;
  nlohmann::json j = read_meta_json(meta_path);
  nlohmann::json fresh = meta_to_json(meta);
  for (const char* key : {"metrics", "evaluated_step", "lr_scale", "callbacks"}) j[key] = fresh[key];
  write_file_atomically(meta_path, j.dump(2) + "\n", "checkpoint");
}

CheckpointMeta validate_checkpoint(const std::filesystem::path& checkpoint) {
  TANDEM_CHECK(fs::is_directory(checkpoint), ErrorCode::kNotFound, "checkpoint '{}' is not a directory",
               checkpoint.string());
  reject_checkpoint_folder(checkpoint);
  std::filesystem::path meta_path = checkpoint / CheckpointManager::kMetaFile;
  nlohmann::json j = read_meta_json(meta_path);
  CheckpointMeta meta = meta_from_json(j, meta_path);
  std::string name = checkpoint.filename().string();
  std::string expected = step_directory_name(meta.step);
  TANDEM_CHECK(!parse_step_directory_name(name) || name == expected, ErrorCode::kDataLoss,
               "checkpoint '{}': meta.json says step {}, which belongs in {}", checkpoint.string(), meta.step,
               expected);
  for (std::string_view file : tensor_files(j)) {
    SafetensorsHeader header = read_safetensors_header(checkpoint / file);
    check_file_record(meta_path, j, file, header);
  }
  return meta;
}

void verify_checkpoint_data(const std::filesystem::path& checkpoint) {
  for (std::string_view file : tensor_files(read_meta_json(checkpoint / CheckpointManager::kMetaFile))) {
    read_safetensors(checkpoint / file);  // throws DataLoss at the first tensor whose checksum fails
  }
}

CheckpointMeta CheckpointManager::load(const std::filesystem::path& checkpoint, nn::Module& model,
                                       optim::Optimizer* optimizer) {
  CheckpointMeta meta = validate_checkpoint(checkpoint);
  std::filesystem::path model_file = checkpoint / kModelFile;
  SafetensorsFile weights = read_safetensors(model_file);
  try {
    with_source(model_file, [&] { model.load_state_dict(weights.tensors, /*strict=*/true); });
  } catch (const Error& e) {
    const std::string saved = saved_model_name(meta);
    if (saved.empty()) throw;
    throw Error(e.code(), fmt::format("{} (the checkpoint holds a '{}' model, {} tensors, saved with that model.name: "
                                      "does this run build the same model, with the same settings?)",
                                      e.what(), saved, weights.tensors.size()));
  }
  if (optimizer != nullptr) load_optimizer(checkpoint, meta, *optimizer);
  spdlog::info("checkpoint: loaded {} (step {}, epoch {})", checkpoint.string(), meta.step, meta.epoch);
  return meta;
}

bool CheckpointManager::load_replica_buffers(const std::filesystem::path& checkpoint, int replica,
                                             nn::Module& model) {
  const std::filesystem::path file = checkpoint / kReplicaBuffersFile;
  if (replica == 0 || !fs::exists(file)) return false;
  SafetensorsFile saved = read_safetensors(file);
  const std::string prefix = fmt::format("replica{}.", replica);
  int found = 0;
  with_source(file, [&] {
    for (auto& [name, buffer] : model.named_buffers()) {
      auto it = saved.tensors.find(prefix + name);
      if (it == saved.tensors.end()) continue;
      TANDEM_CHECK(it->second.shape() == buffer->shape() && it->second.dtype() == buffer->dtype(),
                   ErrorCode::kDataLoss, "{} is {}, but the model's buffer is {}", it->first,
                   it->second.describe(), buffer->describe());
      buffer->copy_from(it->second);
      ++found;
    }
  });
  return found > 0;
}

std::optional<std::filesystem::path> resolve_resume(std::string_view resume, const CheckpointManager& manager) {
  if (resume.empty() || resume == "none") return std::nullopt;
  if (resume == "auto") {
    auto found = manager.latest();
    if (found) {
      spdlog::info("resume: auto picked {}", found->string());
    } else {
      spdlog::info("resume: auto found no complete checkpoint in {}; starting fresh", manager.dir().string());
    }
    return found;
  }
  std::filesystem::path path(resume);
  validate_checkpoint(path);
  return path;
}

}  // namespace tandem::train
