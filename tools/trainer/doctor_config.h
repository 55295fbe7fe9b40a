// `trainer doctor --config FILE`: what a config's run would use (processes, devices, replicas,
// batches) or why it cannot start, and its data layout against the seed's advice (shard count,
// shard sizes, rotational or network storage). Small pure checks, so tests feed sizes and
// environments instead of 100 MB files and launchers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/pipeline/sharding.h"
#include "engine/backend/doctor/doctor.h"
#include "engine/distribute/process_group.h"
#include "engine/distribute/replica_plan.h"
#include "engine/train/config.h"

namespace tandem::tools {

inline constexpr uint64_t kMinShardBytes = 100'000'000;  // the seed's advice: 100-500 MB shards
inline constexpr uint64_t kMaxShardBytes = 500'000'000;

// Where files live: a spinning disk or a network file system starves the input pipeline.
struct StorageInfo {
  std::optional<bool> rotational;  // unset when no block device answers (tmpfs, overlay, NFS)
  bool network = false;            // NFS, CIFS/SMB, FUSE, 9P, ...
  std::string filesystem;          // "ext4-like (0xef53)", "nfs", ...
  std::string detail;              // how the answer was found, or why there is none
};

// What the config's run would use, or the error that stops it.
struct PlanCheck {
  bool ok = false;
  std::string device, devices;         // as configured
  distribute::ReplicaPlan plan;        // valid when ok
  std::vector<backend::Cause> causes;  // the plan error (kError), or the fallback (kWarning)
  bool not_ready = false;              // the run would not start
};

// The process group the launcher's environment and the config describe, and whether this process
// can take its part: Gloo in this build, and a route to the rendezvous.
struct ProcessCheck {
  bool ok = false;
  distribute::ProcessGroupSpec spec;   // valid when ok
  bool gloo = false;                   // this build has Gloo
  std::string route;                   // this host's address toward the rendezvous (several processes)
  std::vector<backend::Cause> causes;
};

struct ConfigCheck {
  std::string path;
  ProcessCheck processes;
  PlanCheck plan;
  std::vector<std::string> patterns;  // data.files
  std::vector<data::ShardFile> files;
  std::vector<StorageInfo> storage;    // one per distinct file system of the files
  std::vector<backend::Cause> causes;  // plan causes, then data causes
  // data.files match no file and no prepare section would make them: the run cannot start.
  std::optional<backend::Cause> missing_data;
};

using PlanFn = std::function<distribute::ReplicaPlan(const train::TrainConfig&, const distribute::ProcessGroupSpec&)>;

// Runs plan_fn (plan_for in the trainer) and turns a tandem::Error into a cause.
PlanCheck check_plan(const train::TrainConfig& config, const PlanFn& plan_fn,
                     const distribute::ProcessGroupSpec& processes = {});

// Resolves the process group (distribute::resolve_process_group) from env and the config; errors
// and a multi-process run without Gloo or without a route to the rendezvous are causes.
ProcessCheck check_processes(const train::TrainConfig& config, const distribute::EnvLookup& env);

// Shard count against cores x GPUs, and sizes against 100-500 MB; warnings with fixes.
std::vector<backend::Cause> check_data_layout(const std::vector<data::ShardFile>& files, int cores, int gpus);

// stat()/statfs() of an existing path; never throws (a failed probe says so in detail).
StorageInfo probe_storage(const std::string& path);
std::vector<backend::Cause> check_storage(const StorageInfo& storage, const std::string& path);

// Everything above for a loaded config; gpus from the doctor's report.
ConfigCheck check_config(const std::string& path, const train::TrainConfig& train,
                         const std::vector<std::string>& patterns, int cores, int gpus, const PlanFn& plan_fn,
                         const distribute::EnvLookup& env = distribute::process_environment());

// Marks the doctor's verdict "not ready" when the config's run cannot start.
void apply_to_verdict(const ConfigCheck& check, backend::DoctorReport& report);

std::string render_config_text(const ConfigCheck& check);
// The "config" object merged into render_json's document.
std::string render_json_with_config(const backend::DoctorReport& report, const ConfigCheck& check);

}  // namespace tandem::tools
