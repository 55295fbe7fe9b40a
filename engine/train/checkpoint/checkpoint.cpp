// CheckpointManager's write side: the atomic save (temporary sibling, fsync of every file and
// directory, rename), keep_last pruning and the directory scan. Loading is in load.cpp.
#include "engine/train/checkpoint/checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <map>

#include <fmt/ranges.h>

#include "engine/core/output_file.h"
#include "engine/train/checkpoint/fs.h"
#include "engine/train/checkpoint/posix.h"
#include "engine/train/checkpoint/safetensors.h"

namespace tandem::train {
namespace {

constexpr std::string_view kStepPrefix = "step-";
// Everything a save or a prune stages starts with this; no real checkpoint does.
constexpr std::string_view kTemporaryPrefix = ".tmp-";

nlohmann::json file_record(const std::filesystem::path& path, size_t tensors) {
  return {{"bytes", fs::file_size(path)}, {"tensors", tensors}};
}

}  // namespace

std::string step_directory_name(int64_t step) { return fmt::format("{}{:08d}", kStepPrefix, step); }

std::optional<int64_t> parse_step_directory_name(std::string_view name) {
  if (!name.starts_with(kStepPrefix) || name.size() == kStepPrefix.size()) return std::nullopt;
  int64_t step = 0;
  const char* first = name.data() + kStepPrefix.size();
  const char* last = name.data() + name.size();
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last || step < 0) return std::nullopt;
  return step;
}

CheckpointManager::CheckpointManager(std::filesystem::path dir, int keep_last)
    : CheckpointManager(std::move(dir), CheckpointOptions{.keep_last = keep_last, .after_stage = {}, .owner = true}) {}

CheckpointManager::CheckpointManager(std::filesystem::path dir, CheckpointOptions options)
    : dir_(std::move(dir)), options_(std::move(options)) {
  TANDEM_CHECK(options_.keep_last >= 0, ErrorCode::kInvalidArgument,
               "checkpoint keep_last must be 0 (keep all) or positive, got {}", options_.keep_last);
  if (!options_.owner) return;
  fs::create_directories(dir_);
  remove_temporaries();
}

std::filesystem::path CheckpointManager::path_for_step(int64_t step) const {
  return dir_ / step_directory_name(step);
}

void CheckpointManager::stage_done(std::string_view stage) const {
  if (options_.after_stage) options_.after_stage(stage);
}

std::filesystem::path CheckpointManager::save(nn::Module& model, const optim::Optimizer& optimizer,
                                              const CheckpointMeta& meta, const TensorMap& replica_buffers) {
  TANDEM_CHECK(meta.step >= 0, ErrorCode::kInvalidArgument, "checkpoint step must not be negative, got {}",
               meta.step);
  auto start = std::chrono::steady_clock::now();
  std::filesystem::path final_path = path_for_step(meta.step);
  std::filesystem::path tmp = dir_ / (std::string(kTemporaryPrefix) + final_path.filename().string());
  fs::remove_all(tmp);
  try {
    fs::create_directory(tmp);
    TensorMap model_state = model.state_dict();
    write_safetensors(tmp / kModelFile, model_state, {{"format", "pt"}});
    stage_done("model");
    TensorMap optimizer_state = optimizer.state_dict();
    write_safetensors(tmp / kOptimizerFile, optimizer_state,
                      {{"format", "pt"}, {"optimizer", optimizer.options().name}});
    stage_done("optimizer");
    if (!replica_buffers.empty()) write_safetensors(tmp / kReplicaBuffersFile, replica_buffers, {{"format", "pt"}});

    CheckpointMeta full = meta;
    if (full.run_id.empty()) full.run_id = run_id_;
    full.optimizer = optimizer.options().name;
    full.optimizer_steps = optimizer.steps_taken();
    full.lr = optimizer.lr();
    full.tandem_version = tandem_version();
    full.saved_at.clear();  // meta_to_json stamps the time
    nlohmann::json j = meta_to_json(full);
    j["files"] = {{kModelFile, file_record(tmp / kModelFile, model_state.size())},
                  {kOptimizerFile, file_record(tmp / kOptimizerFile, optimizer_state.size())}};
    if (!replica_buffers.empty()) {
      j["files"][std::string(kReplicaBuffersFile)] = file_record(tmp / kReplicaBuffersFile, replica_buffers.size());
    }
    write_file_atomically(tmp / kMetaFile, j.dump(2) + "\n", "checkpoint");
    stage_done("meta");
    posix::sync_directory(tmp);
    stage_done("synced");

    bool replacing = fs::exists(final_path);
    if (replacing) {
      // Same step saved again (a resumed run): swap atomically, then drop the old one.
      posix::exchange_paths(tmp, final_path);
    } else {
      posix::rename_path(tmp, final_path);
    }
    stage_done("renamed");
    posix::sync_directory(dir_);
    if (replacing) fs::remove_all(tmp);
  } catch (...) {
    fs::remove_all_noexcept(tmp);
    throw;
  }
  prune(final_path);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("checkpoint: step {} saved to {} ({:.1f} MB in {:.2f} s)", meta.step, final_path.string(),
               static_cast<double>(fs::directory_bytes(final_path)) / 1e6, seconds);
  return final_path;
}

std::vector<CheckpointManager::Entry> CheckpointManager::scan() const {
  std::vector<Entry> out;
  for (const auto& path : fs::list_directory(dir_)) {
    auto step = parse_step_directory_name(path.filename().string());
    if (step && fs::is_directory(path)) out.push_back({*step, path});
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.step < b.step; });
  return out;
}

std::optional<std::filesystem::path> CheckpointManager::latest() const {
  std::vector<Entry> entries = scan();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    try {
      validate_checkpoint(it->path);
      verify_checkpoint_data(it->path);  // a flipped bit in a tensor leaves every header valid
      return it->path;
    } catch (const std::exception& e) {  // whatever is wrong with it, resume goes on to the next
      spdlog::warn("checkpoint: skipping {}, it is incomplete or damaged: {}", it->path.string(), e.what());
    }
  }
  return std::nullopt;
}

std::vector<std::filesystem::path> CheckpointManager::complete_checkpoints() const {
  std::vector<std::filesystem::path> out;
  for (const auto& e : scan()) {
    try {
      validate_checkpoint(e.path);
      out.push_back(e.path);
    } catch (const std::exception&) {
      // Not complete: neither listed nor counted towards keep_last.
    }
  }
  return out;
}

void CheckpointManager::remove_temporaries() const {
  for (const auto& path : fs::list_directory(dir_)) {
    if (!path.filename().string().starts_with(kTemporaryPrefix)) continue;
    if (fs::remove_all_noexcept(path)) {
      spdlog::info("checkpoint: removed {}, left by an interrupted save", path.string());
    }
  }
}

void CheckpointManager::prune(const std::filesystem::path& just_saved) const {
  if (options_.keep_last <= 0) return;
  std::vector<std::filesystem::path> others;
  for (const auto& e : scan()) {
    if (e.path == just_saved) continue;
    try {
      // Another run's checkpoint is never this run's to remove (check_one_run keeps runs apart).
      if (validate_checkpoint(e.path).run_id == run_id_) others.push_back(e.path);
    } catch (const std::exception&) {
      // Not complete: neither listed nor counted towards keep_last.
    }
  }
  // The one just saved always stays; of the others, the newest keep_last - 1 stay too.
  size_t keep_others = static_cast<size_t>(options_.keep_last - 1);
  if (others.size() <= keep_others) return;
  others.resize(others.size() - keep_others);  // oldest first: what remains goes
  for (const auto& p : others) {
    // Renamed first, so a crash while deleting never leaves half a checkpoint under its real name.
    std::filesystem::path doomed = dir_ / (std::string(kTemporaryPrefix) + "delete-" + p.filename().string());
    try {
      posix::rename_path(p, doomed);
      posix::sync_directory(dir_);
      fs::remove_all(doomed);
      spdlog::info("checkpoint: removed {} (keep_last {})", p.string(), options_.keep_last);
    } catch (const Error& e) {
      spdlog::warn("checkpoint: could not remove {} for keep_last {}: {}", p.string(), options_.keep_last, e.what());
    }
  }
}

}  // namespace tandem::train

namespace tandem::train {

void check_one_run(const CheckpointManager& manager, const std::optional<std::string>& run_id) {
  std::map<std::string, std::filesystem::path> newest_of_run;  // run id -> its newest checkpoint
  for (const auto& path : manager.complete_checkpoints()) {
    const std::string id = validate_checkpoint(path).run_id;
    // A resumed run may find checkpoints from before run ids beside its own: the run it continues
    // wrote them when it adopted its id (a fresh run refuses them all the same).
    if (run_id && id.empty()) continue;
    if (!run_id || id != *run_id) newest_of_run[id] = path;
  }
  if (newest_of_run.empty()) return;
  std::vector<std::string> runs;
  for (const auto& [id, path] : newest_of_run) {
    runs.push_back(fmt::format("{} (newest {})", id.empty() ? "a run from before run ids" : "run " + id,
                               path.filename().string()));
  }
  throw_error(ErrorCode::kFailedPrecondition,
              "checkpoint directory {} holds checkpoints of {}, and this {}: checkpoints of different runs never "
              "share a directory (keep_last would prune one run's for the other's, and resume: auto would continue "
              "the wrong one). Resume that run (checkpoint.resume: auto), give this run its own directory (--run-dir "
              "or output.run_dir; checkpoint.dir if set), or move the old checkpoints away",
              manager.dir().string(), fmt::join(runs, ", "),
              run_id ? fmt::format("run resumes run {}", run_id->empty() ? "from before run ids" : *run_id)
                     : std::string("run starts fresh"));
}

}  // namespace tandem::train
