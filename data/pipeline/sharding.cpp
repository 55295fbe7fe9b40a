// The sharding plan: which files and records each replica reads, and why auto chose so.
#include "data/pipeline/sharding.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/core/suggest.h"

namespace tandem::data {
namespace {

// A file's weight for balance: records when every file was counted, else bytes.
double weight(const ShardFile& f, bool use_records) {
  return use_records ? static_cast<double>(f.records) : static_cast<double>(f.bytes);
}

ShardPlan by_file(const std::vector<ShardFile>& files, int replicas) {
  ShardPlan plan;
  plan.resolved = ShardPolicy::kFile;
  plan.replicas.resize(static_cast<size_t>(replicas));
  for (int r = 0; r < replicas; ++r) {
    ReplicaShard& shard = plan.replicas[static_cast<size_t>(r)];
    shard.replica = r;
    shard.expected_records = 0;
    for (size_t i = static_cast<size_t>(r); i < files.size(); i += static_cast<size_t>(replicas)) {
      shard.files.push_back(files[i].path);
      shard.expected_records = files[i].records < 0 || shard.expected_records < 0 ? -1
                                                                                 : shard.expected_records + files[i].records;
    }
  }
  return plan;
}

ShardPlan by_record(const std::vector<ShardFile>& files, int replicas, bool strided) {
  ShardPlan plan;
  plan.resolved = strided ? ShardPolicy::kData : ShardPolicy::kOff;
  int64_t total = 0;
  for (const ShardFile& f : files) total = (f.records < 0 || total < 0) ? -1 : total + f.records;
  for (int r = 0; r < replicas; ++r) {
    ReplicaShard shard;
    shard.replica = r;
    for (const ShardFile& f : files) shard.files.push_back(f.path);
    shard.record_stride = strided ? replicas : 1;
    shard.record_offset = strided ? r : 0;
    shard.expected_records = total < 0 ? -1 : strided ? (total - r + replicas - 1) / replicas : total;
    plan.replicas.push_back(std::move(shard));
  }
  return plan;
}

// The least replica's share of the most loaded one under by-file sharding, in [0, 1].
double file_balance(const std::vector<ShardFile>& files, int replicas) {
  bool use_records = std::all_of(files.begin(), files.end(), [](const ShardFile& f) { return f.records >= 0; });
  std::vector<double> load(static_cast<size_t>(replicas), 0.0);
  for (size_t i = 0; i < files.size(); ++i) load[i % load.size()] += weight(files[i], use_records);
  auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  return *hi <= 0 ? 1.0 : *lo / *hi;
}

std::string short_list(const std::vector<std::string>& files) {
  std::string out;
  size_t shown = std::min<size_t>(files.size(), 3);
  for (size_t i = 0; i < shown; ++i) {
    const std::string& f = files[i];
    size_t slash = f.find_last_of('/');
    out += (i ? ", " : "") + (slash == std::string::npos ? f : f.substr(slash + 1));
  }
  if (files.size() > shown) out += fmt::format(", ... (+{} more)", files.size() - shown);
  return out;
}

}  // namespace

std::string_view shard_policy_name(ShardPolicy policy) {
  switch (policy) {
    case ShardPolicy::kAuto: return "auto";
    case ShardPolicy::kFile: return "file";
    case ShardPolicy::kData: return "data";
    case ShardPolicy::kOff: return "off";
  }
  return "?";
}

ShardPolicy parse_shard_policy(std::string_view name) {
  for (ShardPolicy p : {ShardPolicy::kAuto, ShardPolicy::kFile, ShardPolicy::kData, ShardPolicy::kOff}) {
    if (name == shard_policy_name(p)) return p;
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown shard policy '{}': expected auto, file, data or off{}", name,
              did_you_mean(name, {"auto", "file", "data", "off"}));
}

ShardPlan plan_shards(const std::vector<ShardFile>& files, int num_replicas, ShardPolicy policy) {
  TANDEM_CHECK(num_replicas >= 1, ErrorCode::kInvalidArgument, "sharding over {} replicas: need at least 1",
               num_replicas);
  TANDEM_CHECK(!files.empty(), ErrorCode::kInvalidArgument, "sharding: no input files");
  ShardPlan plan;
  const size_t n = files.size();
  const auto replicas = static_cast<size_t>(num_replicas);
  if (policy == ShardPolicy::kFile) {
    TANDEM_CHECK(n >= replicas, ErrorCode::kInvalidArgument,
                 "shard_policy: file needs at least as many files as replicas, got {} files for {} replicas; "
                 "use auto or data",
                 n, num_replicas);
    plan = by_file(files, num_replicas);
    plan.reason = "requested";
  } else if (policy == ShardPolicy::kData || policy == ShardPolicy::kOff) {
    plan = by_record(files, num_replicas, policy == ShardPolicy::kData);
    plan.reason = "requested";
  } else if (num_replicas == 1) {
    plan = by_file(files, 1);
    plan.reason = "one replica reads every file";
  } else if (n < replicas) {
    plan = by_record(files, num_replicas, true);
    plan.reason = fmt::format("{} files < {} replicas, so by record", n, num_replicas);
  } else {
    double share = file_balance(files, num_replicas);
    if (share >= kBalancedShare) {
      plan = by_file(files, num_replicas);
      plan.reason = fmt::format("{} files >= {} replicas and balanced (least/most = {:.2f} >= {})", n, num_replicas,
                                share, kBalancedShare);
    } else {
      plan = by_record(files, num_replicas, true);
      plan.reason = fmt::format("by file the least loaded replica would hold {:.2f} of the most (< {}), so by record",
                                share, kBalancedShare);
    }
  }
  plan.requested = policy;
  return plan;
}

std::vector<std::string> ShardPlan::describe() const {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("shard plan: policy {} -> {} ({}), {} replica{}", shard_policy_name(requested),
                              shard_policy_name(resolved), reason, replicas.size(), replicas.size() == 1 ? "" : "s"));
  for (const ReplicaShard& r : replicas) {
    std::string records = r.expected_records < 0 ? "records not counted" : fmt::format("{} records", r.expected_records);
    std::string what = resolved == ShardPolicy::kFile
                           ? fmt::format("{} file{} [{}]", r.files.size(), r.files.size() == 1 ? "" : "s",
                                         short_list(r.files))
                           : fmt::format("all {} files, records i % {} == {}", r.files.size(), r.record_stride,
                                         r.record_offset);
    lines.push_back(fmt::format("  replica {}: {}; {}", r.replica, what, records));
  }
  return lines;
}

}  // namespace tandem::data
