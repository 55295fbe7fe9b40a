// The checks of `trainer doctor --config`: the replica plan (or the error that stops the run) and
// the data layout against the seed's advice. Pure where it can be: tests feed sizes and plan
// functions instead of big files and GPUs.
#include "tools/trainer/doctor_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "data/pipeline/replica_pipeline.h"
#include "engine/distribute/bootstrap/socket.h"
#include "engine/distribute/process_link.h"
#include "engine/core/error.h"

namespace tandem::tools {
namespace {

using backend::Cause;
using backend::Severity;

std::string mb(uint64_t bytes) { return fmt::format("{:.1f} MB", static_cast<double>(bytes) / 1e6); }

// "a.tfrecord (23.5 MB), b.tfrecord (12.0 MB) and 3 more": which shards, without flooding the screen.
std::string list_files(const std::vector<const data::ShardFile*>& files) {
  std::string out;
  constexpr size_t kShown = 4;
  for (size_t i = 0; i < files.size() && i < kShown; ++i) {
    out += fmt::format("{}{} ({})", i == 0 ? "" : ", ", std::filesystem::path(files[i]->path).filename().string(),
                       mb(files[i]->bytes));
  }
  if (files.size() > kShown) out += fmt::format(" and {} more", files.size() - kShown);
  return out;
}

std::string plan_fix(const Error& e) {
  if (e.code() == ErrorCode::kUnavailable) {
    return "fix the GPU cause the doctor names above, or set device: auto (falls back to the CPU) or device: cpu";
  }
  return "pick a train.global_batch_size that the replica count divides (the message names the nearest), "
         "or give train.per_replica_batch_size, or change devices";
}

}  // namespace

PlanCheck check_plan(const train::TrainConfig& config, const PlanFn& plan_fn,
                     const distribute::ProcessGroupSpec& processes) {
  PlanCheck out;
  out.device = config.device.device;
  out.devices = config.device.devices;
  try {
    out.plan = plan_fn(config, processes);
    out.ok = true;
    if (!out.plan.fallback_warning.empty()) {
      out.causes.push_back({Severity::kNoGpu, out.plan.fallback_warning,
                            "see the causes above; set device: cpu to silence this, device: cuda to refuse it"});
    }
  } catch (const Error& e) {
    // Whatever stops plan_for stops the run: the batch arithmetic, a missing GPU, a bad device list.
    out.not_ready = true;
    out.causes.push_back({Severity::kError, e.what(), plan_fix(e)});
  }
  return out;
}

std::vector<Cause> check_data_layout(const std::vector<data::ShardFile>& files, int cores, int gpus) {
  std::vector<Cause> causes;
  if (files.empty()) return causes;
  int needed = std::max(cores, 1) * std::max(gpus, 1);
  uint64_t total = 0;
  for (const auto& f : files) total += f.bytes;
  if (static_cast<int>(files.size()) < needed) {
    uint64_t size = std::max<uint64_t>(total / static_cast<uint64_t>(needed), 1'000'000);
    causes.push_back({Severity::kWarning,
                      fmt::format("{} TFRecord file{} for {} core{} x {} GPU{}: the advice is at least {} shards, so "
                                  "every parallel reader and every replica streams a file of its own",
                                  files.size(), files.size() == 1 ? "" : "s", cores, cores == 1 ? "" : "s",
                                  std::max(gpus, 1), gpus == 1 ? "" : "s", needed),
                      fmt::format("re-shard into at least {} files: trainer convert --shard-size {}MB", needed,
                                  size / 1'000'000)});
  }
  std::vector<const data::ShardFile*> small, large;
  for (const auto& f : files) {
    if (f.bytes < kMinShardBytes) small.push_back(&f);
    if (f.bytes > kMaxShardBytes) large.push_back(&f);
  }
  if (!small.empty()) {
    causes.push_back({Severity::kWarning,
                      fmt::format("{} of {} shards under 100 MB: {} (many small files mean many opens and short "
                                  "reads)", small.size(), files.size(), list_files(small)),
                      "trainer convert --shard-size 200MB (aim for 100-500 MB; for a data set this small, "
                      "data.cache: true matters more)"});
  }
  if (!large.empty()) {
    causes.push_back({Severity::kWarning,
                      fmt::format("{} of {} shards over 500 MB: {} (too few files to spread over readers and "
                                  "replicas, coarse shuffling)", large.size(), files.size(), list_files(large)),
                      "trainer convert --shard-size 200MB (aim for 100-500 MB)"});
  }
  return causes;
}

ProcessCheck check_processes(const train::TrainConfig& config, const distribute::EnvLookup& env) {
  ProcessCheck out;
  out.gloo = distribute::ProcessLink::available();
  try {
    out.spec = distribute::resolve_process_group(train::process_group_request(config), env);
  } catch (const Error& e) {
    out.causes.push_back({Severity::kError, e.what(),
                          "fix the launcher's variables or the distribute.* keys (docs/DISTRIBUTE.md, \"Launching\")"});
    return out;
  }
  out.ok = true;
  if (!out.spec.multi_process()) return out;
  if (!out.gloo) {
    out.ok = false;
    out.causes.push_back({Severity::kError, fmt::format("{} processes need Gloo, and this build has none", out.spec.size),
                          "apt-get install libgloo-dev (tools/scripts/install_deps.sh), then reconfigure and rebuild"});
  }
  try {
    out.route = distribute::bootstrap::local_address_toward(out.spec.address, out.spec.port);
  } catch (const Error& e) {
    out.ok = false;
    out.causes.push_back({Severity::kError, e.what(),
                          "set MASTER_ADDR (or distribute.address) to a name or address of process 0's host that "
                          "this host resolves and routes to"});
  }
  return out;
}

ConfigCheck check_config(const std::string& path, const train::TrainConfig& train,
                         const std::vector<std::string>& patterns, int cores, int gpus, const PlanFn& plan_fn,
                         const distribute::EnvLookup& env) {
  ConfigCheck out;
  out.path = path;
  out.patterns = patterns;
  out.processes = check_processes(train, env);
  out.plan = check_plan(train, plan_fn, out.processes.ok ? out.processes.spec : distribute::ProcessGroupSpec{});
  out.causes = out.processes.causes;
  out.causes.insert(out.causes.end(), out.plan.causes.begin(), out.plan.causes.end());
  std::vector<std::string> paths;
  try {
    paths = data::resolve_files(patterns);
  } catch (const Error& e) {
    if (train.prepare.source != "none") {
      out.causes.push_back({Severity::kWarning, e.what(),
                            "`trainer --config FILE` makes them first, from prepare.source " + train.prepare.source});
      return out;
    }
    out.missing_data = Cause{Severity::kError, e.what(),
                             "check data.files (a path relative to where the trainer starts?), or make the files "
                             "with `trainer convert`"};
    out.causes.push_back(*out.missing_data);
    return out;
  }
  out.files = data::describe_files(paths, false);
  for (Cause& c : check_data_layout(out.files, cores, gpus)) out.causes.push_back(std::move(c));
  std::set<std::string> dirs;  // one probe per folder: files of one folder share a device
  for (const auto& p : paths) dirs.insert(std::filesystem::path(p).parent_path().string());
  for (const auto& dir : dirs) {
    std::string probe = dir.empty() ? "." : dir;
    out.storage.push_back(probe_storage(probe));
    for (Cause& c : check_storage(out.storage.back(), probe)) out.causes.push_back(std::move(c));
  }
  return out;
}

void apply_to_verdict(const ConfigCheck& check, backend::DoctorReport& report) {
  if (report.verdict == backend::Verdict::kNotReady) return;
  const std::vector<Cause>* causes = !check.processes.ok ? &check.processes.causes
                                     : check.plan.not_ready ? &check.plan.causes
                                                            : nullptr;
  std::string why;
  if (causes != nullptr && !causes->empty()) {
    why = causes->front().summary;
  } else if (check.missing_data) {
    why = check.missing_data->summary;
  } else {
    return;
  }
  report.verdict = backend::Verdict::kNotReady;
  report.verdict_line = "not ready: " + why;
}

}  // namespace tandem::tools
