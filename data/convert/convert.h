// Writes a ConvertSource as sharded TFRecords the way the usual advice goes: shards of a
// target size, at least a minimum count, records dealt to shards in a seeded shuffled order,
// shards written in parallel, optionally GZIP-compressed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/compression.h"
#include "data/convert/source.h"

namespace tandem::data {

struct ConvertOptions {
  std::string output_dir;
  std::string prefix = "data";
  uint64_t target_shard_bytes = 128ull << 20;
  int min_shards = 1;       // the verb passes cores x GPUs
  uint64_t seed = 0;
  bool shuffle = true;      // false: shard s holds the s-th run of records, in order (seed unused)
  Compression compression = Compression::kNone;  // none or gzip (zlib works too)
  int threads = 0;          // 0: available cores
  bool write_index = false;  // DALI-style .idx beside each uncompressed shard
  // Shards of an earlier convert with this prefix in output_dir (PREFIX-NNNNN-of-NNNNN.tfrecord...)
  // are an error unless this deletes them first: a glob over the folder would read both sets.
  bool overwrite = false;
  // Called on the calling thread about five times a second with records written so far.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct ShardInfo {
  std::string path;
  uint64_t records = 0;
  uint64_t bytes = 0;  // file size
};

struct ConvertSummary {
  std::vector<ShardInfo> shards;
  uint64_t records = 0;
  uint64_t bytes = 0;
  std::map<int64_t, uint64_t> records_per_class;  // by label; empty for a source without labels
  std::map<int64_t, std::string> class_names;
};

// The number of shards: max(min_shards, ceil(estimated / target)), at most one per record, at least 1.
int plan_shard_count(uint64_t estimated_bytes, uint64_t records, const ConvertOptions& options);

// Shard s gets the records at positions s, s + n, s + 2n, ... of a seeded permutation.
std::vector<std::vector<size_t>> deal_records(size_t records, int shards, uint64_t seed);
// Shard s gets the s-th of `shards` runs of consecutive records, the first runs one longer when
// they do not divide.
std::vector<std::vector<size_t>> deal_in_order(size_t records, int shards);

ConvertSummary convert(const ConvertSource& source, const ConvertOptions& options);

}  // namespace tandem::data
