// Per-replica sharding with tf.data's policy names (DESIGN.md): file (replica r reads files
// r, r+R, ...), data (record i goes to replica i % R), off (every replica reads everything),
// and auto (by file when files >= replicas and balanced, else by record; it never fails).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data {

enum class ShardPolicy { kAuto, kFile, kData, kOff };
std::string_view shard_policy_name(ShardPolicy policy);  // "auto", "file", "data", "off"
ShardPolicy parse_shard_policy(std::string_view name);   // kInvalidArgument with a did-you-mean

// By-file sharding counts as balanced when the replica with the least data holds at least this
// share of the replica with the most (records when counted, else bytes): replicas step in
// lockstep, so what the largest holds beyond the smallest would be dropped at the epoch's end.
inline constexpr double kBalancedShare = 0.9;

struct ShardFile {
  std::string path;
  uint64_t bytes = 0;
  int64_t records = -1;  // -1: not counted
};

struct ReplicaShard {
  int replica = 0;
  std::vector<std::string> files;  // the files this replica opens, in order
  int64_t record_stride = 1;       // keeps the records i (counted in reading order, alike on all replicas)
  int64_t record_offset = 0;       // with i % record_stride == record_offset
  int64_t expected_records = -1;   // -1 when the files were not counted
};

struct ShardPlan {
  ShardPolicy requested = ShardPolicy::kAuto;
  ShardPolicy resolved = ShardPolicy::kOff;  // kFile, kData or kOff
  std::string reason;                        // why this policy, for the log
  std::vector<ReplicaShard> replicas;

  // The plan as log lines: the policy and why, then one line per replica.
  std::vector<std::string> describe() const;
};

// Decides who reads what. files must be in a fixed order (sorted) so every replica plans alike.
ShardPlan plan_shards(const std::vector<ShardFile>& files, int num_replicas, ShardPolicy policy);

// Sizes (and, when count_records, record counts) of files, for plan_shards.
std::vector<ShardFile> describe_files(const std::vector<std::string>& paths, bool count_records, bool strict = false,
                                      uint64_t max_record_bytes = uint64_t{256} << 20);
// Records in a TFRecord file: hops over headers when uncompressed, else reads through it. strict
// (on_corrupt: fail): damaged framing is a DataLoss naming the file and offset; otherwise the
// records before it are counted. max_record_bytes: data.max_record_mb, for compressed files.
int64_t count_records(const std::string& path, bool strict = false, uint64_t max_record_bytes = uint64_t{256} << 20);

}  // namespace tandem::data
