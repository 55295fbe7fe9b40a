// Checkpoints: one directory per save (DIR/step-00001200/ holding model.safetensors,
// optimizer.safetensors and meta.json), written atomically, pruned to the newest keep_last,
// found again by resume: auto. docs/CHECKPOINTS.md describes the layout and guarantees.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/nn/module.h"
#include "engine/optim/optimizer.h"
#include "engine/train/checkpoint/meta.h"
#include "engine/train/checkpoint/safetensors.h"

namespace tandem::train {

struct CheckpointOptions {
  int keep_last = 0;  // keep the newest K complete checkpoints; 0 keeps all
  // Test hook, called after each stage of a save: "model", "optimizer", "meta" (files written and
  // fsynced), "synced" (temporary directory fsynced), "renamed" (under its real name). Throwing or
  // dying there is how tests crash a save at a known point.
  std::function<void(std::string_view stage)> after_stage;
  // The process that writes this directory (process 0 of a multi-process run). Others only read:
  // they neither create the directory nor remove the temporaries of a save in progress.
  bool owner = true;
};

class CheckpointManager {
 public:
  static constexpr std::string_view kModelFile = "model.safetensors";
  static constexpr std::string_view kOptimizerFile = "optimizer.safetensors";
  static constexpr std::string_view kMetaFile = "meta.json";
  // The running statistics of replicas 1..R-1 when they differ from replica 0's (per-replica
  // BatchNorm), as "replica<r>.<buffer name>"; replica 0's are in the model file.
  static constexpr std::string_view kReplicaBuffersFile = "replica_buffers.safetensors";

  // Creates dir if needed and removes temporaries a crashed save left there. One manager (one
  // process) writes a directory at a time.
  CheckpointManager(std::filesystem::path dir, int keep_last);
  CheckpointManager(std::filesystem::path dir, CheckpointOptions options);

  const std::filesystem::path& dir() const { return dir_; }
  // The run this manager saves for: stamped into every checkpoint's meta.json, and keep_last prunes
  // only checkpoints of this run (never another run's that shares the directory).
  void set_run_id(std::string run_id) { run_id_ = std::move(run_id); }
  const std::string& run_id() const { return run_id_; }
  std::filesystem::path path_for_step(int64_t step) const;  // dir/step-00001200

  // Writes the model's state_dict, the optimizer's state and meta (its optimizer, lr, version and
  // time fields are filled here) to a temporary sibling, fsyncs it all and renames it into place;
  // a checkpoint of the same step is replaced in one atomic exchange. Then prunes to keep_last.
  // On failure throws, removes the temporary and leaves every earlier checkpoint as it was.
  // replica_buffers, when not empty, go to kReplicaBuffersFile in the same atomic save.
  std::filesystem::path save(nn::Module& model, const optim::Optimizer& optimizer, const CheckpointMeta& meta,
                             const TensorMap& replica_buffers = {});

  // The newest complete checkpoint; damaged ones are skipped with a warning naming them.
  std::optional<std::filesystem::path> latest() const;
  // Every complete checkpoint, oldest first (damaged ones left out silently).
  std::vector<std::filesystem::path> complete_checkpoints() const;

  // Restores model (strict: every name and shape must match) and, when given, optimizer (state,
  // steps taken, lr) from a checkpoint directory; returns its metadata. Errors name the file and tensor.
  static CheckpointMeta load(const std::filesystem::path& checkpoint, nn::Module& model,
                             optim::Optimizer* optimizer);
  // Replica `replica`'s own buffers (see kReplicaBuffersFile) into model, after load; false when
  // the checkpoint holds none for it (replica 0, identical statistics, or fewer replicas saved).
  static bool load_replica_buffers(const std::filesystem::path& checkpoint, int replica, nn::Module& model);

 private:
  struct Entry {
    int64_t step;
    std::filesystem::path path;
  };
  std::vector<Entry> scan() const;  // step-* directories, oldest first
  void remove_temporaries() const;
  void prune(const std::filesystem::path& just_saved) const;
  void stage_done(std::string_view stage) const;

  std::filesystem::path dir_;
  CheckpointOptions options_;
  std::string run_id_;
};

// "step-00001200": a checkpoint's directory name, and the step back from one (nullopt otherwise).
std::string step_directory_name(int64_t step);
std::optional<int64_t> parse_step_directory_name(std::string_view name);

// Reads meta.json and both safetensors headers (no tensor data) and checks them against each
// other; throws (DataLoss for damage, NotFound for a missing file) naming the checkpoint.
CheckpointMeta validate_checkpoint(const std::filesystem::path& checkpoint);

// After an evaluation at a checkpoint's step: the checkpoint's meta.json gets meta's metrics, lr
// scale and callback states (which that evaluation changed), atomically, so that a run resumed
// from it goes on as the run that wrote it did.
void update_checkpoint_meta(const std::filesystem::path& checkpoint, const CheckpointMeta& meta);

// Reads both tensor files whole, verifying every tensor's checksum (safetensors.h): DataLoss names
// the damaged tensor. resume: auto runs it on its candidate, so a damaged newest one is skipped.
void verify_checkpoint_data(const std::filesystem::path& checkpoint);

// Checkpoints of one run only: throws FailedPrecondition when the manager's directory holds a
// complete checkpoint whose run id is not `run_id` (for a fresh run, nullopt: any checkpoint at all;
// a resumed run passes checkpoints written before run ids, which its own run may have written),
// naming the runs found and what to do. A fresh run there would have its checkpoints pruned by
// keep_last in favour of the older run's, and resume: auto would continue the older run.
void check_one_run(const CheckpointManager& manager, const std::optional<std::string>& run_id);

// The checkpoint a `resume:` setting names: "auto" the newest complete and undamaged one (or none), "" or
// "none" none, anything else a checkpoint directory that must be complete.
std::optional<std::filesystem::path> resolve_resume(std::string_view resume, const CheckpointManager& manager);

}  // namespace tandem::train
