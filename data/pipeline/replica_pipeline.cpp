// The per-replica pipeline: the order of stages follows DESIGN.md (shard before shuffle and
// before heavy map work), so each replica parses and decodes only its own records.
#include "data/pipeline/replica_pipeline.h"

#include <glob.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "data/crc32c.h"
#include "engine/core/context.h"
#include "engine/core/error.h"

namespace tandem::data {
namespace {

size_t memory_budget_bytes(const PipelineConfig& config) {
  if (config.memory_budget_mb > 0) return static_cast<size_t>(config.memory_budget_mb) << 20;
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page_size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size) / 2
                                    : size_t{4} << 30;
}

// "<cache_file>.replica-R-of-N.<crc>": the CRC covers what decides the cached records (the
// replica's files with their sizes and modification times, its record shard, how they are read
// and in which order, since under record sharding the order decides which records a replica
// keeps), so a changed data set, shard plan or an eval_data section given the same path gets a
// file of its own instead of stale records. The seed and shuffle are not in it: nothing ahead of
// a cache is shuffled (build_replica_dataset).
std::string cache_file_name(const PipelineConfig& config, const ShardPlan& plan, int replica) {
  const ReplicaShard& shard = plan.replicas.at(static_cast<size_t>(replica));
  std::string identity = fmt::format("{}/{}/{}/{}/{}/{}\n", shard.record_stride, shard.record_offset,
                                     compression_name(config.compression), on_corrupt_name(config.on_corrupt),
                                     config.cycle_length, config.block_length);
  for (const std::string& file : shard.files) {
    // A file that cannot be looked at counts as -1; reading it will say what is wrong.
    std::error_code size_error, time_error;
    uintmax_t size = std::filesystem::file_size(file, size_error);
    auto mtime = std::filesystem::last_write_time(file, time_error).time_since_epoch().count();
    identity += fmt::format("{} {} {}\n", file, size_error ? -1 : static_cast<int64_t>(size),
                            time_error ? -1 : static_cast<int64_t>(mtime));
  }
  return fmt::format("{}.replica-{}-of-{}.{:08x}", config.cache_file, replica, plan.replicas.size(),
                     crc32c(identity));
}

}  // namespace

std::vector<std::string> resolve_files(const std::vector<std::string>& patterns) {
  std::set<std::string> files;
  for (const std::string& pattern : patterns) {
    glob_t matches{};
    int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
    size_t found = rc == 0 ? matches.gl_pathc : 0;
    std::string directory;
    for (size_t i = 0; i < found; ++i) {
      std::error_code ec;
      if (std::filesystem::is_directory(matches.gl_pathv[i], ec)) {
        directory = matches.gl_pathv[i];
      } else {
        files.insert(matches.gl_pathv[i]);
      }
    }
    globfree(&matches);
    TANDEM_CHECK(directory.empty(), ErrorCode::kInvalidArgument,
                 "data.files: '{}' is a directory; give the files in it, e.g. '{}/*.tfrecord'", directory,
                 directory);
    TANDEM_CHECK(found > 0, ErrorCode::kNotFound, "data.files: no file matches '{}'", pattern);
  }
  return {files.begin(), files.end()};
}

Dataset build_replica_dataset(const PipelineConfig& config, const ShardPlan& plan, int replica) {
  const ReplicaShard& shard = plan.replicas.at(static_cast<size_t>(replica));
  const bool by_file = plan.resolved == ShardPolicy::kFile;
  // Under data sharding every replica must see the same file order, so the file shuffle uses
  // the common seed; under file sharding each replica shuffles its own files.
  uint64_t file_seed = config.seed + (by_file ? static_cast<uint64_t>(replica) * 0x9e3779b9ULL : 0);
  // No file shuffle ahead of a cache: each replica fills its cache in whichever epoch it first
  // completes a pass, and under data sharding the per-epoch file order decides which records a
  // replica keeps, so caches filled in different epochs would overlap and miss records. The
  // element shuffle after the cache still gives every epoch its own order.
  const bool cached = config.cache || !config.cache_file.empty();
  bool shuffle_files = config.shuffle_buffer > 0 && shard.files.size() > 1 && !cached;
  Dataset ds = Dataset::from_files(shard.files, shuffle_files, file_seed);

  TFRecordReaderOptions reader;
  reader.compression = config.compression;
  reader.on_corrupt = config.on_corrupt;
  reader.max_record_bytes = static_cast<uint64_t>(config.max_record_mb) << 20;
  int64_t cycle = config.cycle_length == kAutotune
                      ? std::clamp<int64_t>(static_cast<int64_t>(shard.files.size()), 1, 8)
                      : config.cycle_length;
  // Record sharding counts records in the reading order, which must then be the same on every
  // replica: only file sharding (or none) may take the faster, non-deterministic order.
  bool ordered_reads = config.deterministic || shard.record_stride > 1;
  ds = ds.interleave([reader](const Element& file) { return Dataset::tfrecord(file.text, reader); }, cycle,
                     config.block_length, config.num_parallel_reads, ordered_reads);
  if (shard.record_stride > 1) ds = ds.shard(shard.record_stride, shard.record_offset);
  if (!config.cache_file.empty()) {
    ds = ds.cache(cache_file_name(config, plan, replica));
  } else if (config.cache) {
    ds = ds.cache();
  }
  if (config.shuffle_buffer > 0) {
    ds = ds.shuffle(config.shuffle_buffer, config.seed * 31 + static_cast<uint64_t>(replica),
                    config.reshuffle_each_iteration);
  }
  if (config.tokens) {
    ds = ds.map(make_token_map(*config.tokens), config.num_parallel_calls, config.deterministic, "map(tokens)");
  } else {
    ImageMapOptions image = config.image;
    image.seed = config.seed;
    image.replica = replica;
    ds = ds.map(make_image_map(image), config.num_parallel_calls, config.deterministic, "map(decode+augment)");
  }
  return ds.batch(replica_batch_size(config, static_cast<int>(plan.replicas.size())), config.drop_remainder)
      .prefetch(config.prefetch);
}

ReplicaPipelines build_replica_pipelines(const PipelineConfig& config, int num_replicas, int first_replica,
                                         int local_replicas, bool log_plan) {
  if (local_replicas < 0) local_replicas = num_replicas - first_replica;
  TANDEM_CHECK(first_replica >= 0 && local_replicas >= 1 && first_replica + local_replicas <= num_replicas,
               ErrorCode::kInvalidArgument, "replicas {} to {} of {}", first_replica,
               first_replica + local_replicas - 1, num_replicas);
  std::vector<std::string> files = resolve_files(config.files);
  ReplicaPipelines out;
  out.plan = plan_shards(describe_files(files, config.count_records, config.on_corrupt == OnCorrupt::kFail,
                                        static_cast<uint64_t>(config.max_record_mb) << 20),
                         num_replicas, config.shard_policy);
  if (log_plan) {
    for (const std::string& line : out.plan.describe()) spdlog::info("{}", line);
  }
  int cores = config.cpu_threads > 0 ? config.cpu_threads : available_cores();
  out.budget.cpu_threads = std::max(1, cores / local_replicas);
  // Four queues per replica hold most of the bytes: read-ahead, map results, batches, prefetch.
  out.budget.queue_bytes = std::max<size_t>(memory_budget_bytes(config) / static_cast<size_t>(local_replicas) / 4,
                                            size_t{1} << 20);
  if (log_plan) {
    spdlog::info("input budget per replica: {} loader threads, {} MiB per queue", out.budget.cpu_threads,
                 out.budget.queue_bytes >> 20);
  }
  for (int r = first_replica; r < first_replica + local_replicas; ++r) {
    out.datasets.push_back(build_replica_dataset(config, out.plan, r));
  }
  return out;
}

}  // namespace tandem::data
