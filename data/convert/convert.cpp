// convert(): plans shards, deals a Philox-seeded permutation to them, and writes each shard
// on a ThreadPool worker to a unique temporary beside it (OutputFile), renamed when complete so a crash
// leaves no half shard.
#include "data/convert/convert.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <regex>

#include "data/tfrecord_index.h"
#include "data/tfrecord_writer.h"
#include "engine/core/context.h"
#include "engine/core/error.h"
#include "engine/core/output_file.h"
#include "engine/core/random.h"
#include "engine/core/thread_pool.h"

namespace tandem::data {

namespace fs = std::filesystem;

int plan_shard_count(uint64_t estimated_bytes, uint64_t records, const ConvertOptions& options) {
  TANDEM_CHECK(options.target_shard_bytes > 0, ErrorCode::kInvalidArgument, "the target shard size must be positive");
  uint64_t by_size = (estimated_bytes + options.target_shard_bytes - 1) / options.target_shard_bytes;
  uint64_t n = std::max<uint64_t>(by_size, static_cast<uint64_t>(std::max(1, options.min_shards)));
  n = std::min<uint64_t>(n, std::max<uint64_t>(records, 1));
  return static_cast<int>(std::min<uint64_t>(n, 99999));
}

std::vector<std::vector<size_t>> deal_records(size_t records, int shards, uint64_t seed) {
  std::vector<size_t> order(records);
  for (size_t i = 0; i < records; ++i) order[i] = i;
  Generator g(seed);
  for (size_t i = records; i > 1; --i) std::swap(order[i - 1], order[g.below(i)]);  // Fisher-Yates
  std::vector<std::vector<size_t>> out(static_cast<size_t>(shards));
  for (size_t i = 0; i < records; ++i) out[i % out.size()].push_back(order[i]);
  return out;
}

std::vector<std::vector<size_t>> deal_in_order(size_t records, int shards) {
  std::vector<std::vector<size_t>> out(static_cast<size_t>(shards));
  const size_t base = records / out.size(), longer = records % out.size();
  size_t next = 0;
  for (size_t s = 0; s < out.size(); ++s) {
    for (size_t k = 0; k < base + (s < longer ? 1 : 0); ++k) out[s].push_back(next++);
  }
  return out;
}

namespace {

std::string shard_name(const ConvertOptions& o, int s, int n) {
  std::string name = fmt::format("{}-{:05d}-of-{:05d}.tfrecord", o.prefix, s, n);
  if (o.compression == Compression::kGzip) name += ".gz";
  if (o.compression == Compression::kZlib) name += ".zlib";
  return (fs::path(o.output_dir) / name).string();
}

ShardInfo write_shard(const ConvertSource& source, const std::vector<size_t>& items, const std::string& path,
                      const ConvertOptions& options, std::atomic<uint64_t>& done) {
  TFRecordWriterOptions wo;
  wo.compression = options.compression;
  OutputFile out(path, "convert");  // a unique temporary beside the shard, renamed when complete
  {
    TFRecordWriter writer(TFRecordWriteFd{out.fd()}, out.temp_path().string(), wo);
    for (size_t i : items) {
      writer.write(source.record(i));
      done.fetch_add(1, std::memory_order_relaxed);
    }
    writer.close();
  }
  out.commit();
  if (options.write_index && options.compression == Compression::kNone) write_index(path + ".idx", build_index(path));
  return ShardInfo{path, items.size(), static_cast<uint64_t>(fs::file_size(path))};
}

// The shards (and their .idx files) an earlier convert with this prefix left in the folder.
std::vector<fs::path> earlier_shards(const ConvertOptions& o) {
  static const std::regex numbering(R"(\d{5}-of-\d{5}\.tfrecord(\.gz|\.zlib)?(\.idx)?)");
  const std::string start = o.prefix + "-";
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(o.output_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(start) && std::regex_match(name.substr(start.size()), numbering)) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void clear_earlier_shards(const ConvertOptions& o) {
  std::vector<fs::path> earlier = earlier_shards(o);
  if (earlier.empty()) return;
  TANDEM_CHECK(o.overwrite, ErrorCode::kFailedPrecondition,
               "{} already holds {} file(s) of an earlier convert with prefix '{}' (first {}): the new shards would "
               "sit beside them and a glob over the folder would read both; remove them, choose another --output or "
               "--prefix, or pass --overwrite to delete them first",
               o.output_dir, earlier.size(), o.prefix, earlier.front().filename().string());
  for (const fs::path& p : earlier) {
    std::error_code ec;
    fs::remove(p, ec);
    TANDEM_CHECK(!ec, ErrorCode::kFailedPrecondition, "--overwrite: cannot delete {}: {}", p.string(), ec.message());
  }
  spdlog::info("--overwrite: deleted {} file(s) of an earlier convert in {}", earlier.size(), o.output_dir);
}

}  // namespace

ConvertSummary convert(const ConvertSource& source, const ConvertOptions& options) {
  TANDEM_CHECK(options.compression != Compression::kAuto, ErrorCode::kInvalidArgument,
               "convert: state the output compression (none or gzip)");
  std::error_code ec;
  fs::create_directories(options.output_dir, ec);
  TANDEM_CHECK(!ec, ErrorCode::kNotFound, "cannot create output folder {}: {}", options.output_dir, ec.message());
  clear_earlier_shards(options);
  const int n = plan_shard_count(source.estimated_bytes(), source.size(), options);
  std::vector<std::vector<size_t>> dealt =
      options.shuffle ? deal_records(source.size(), n, options.seed) : deal_in_order(source.size(), n);

  ThreadPool pool(options.threads > 0 ? options.threads : std::min(available_cores(), n), "convert");
  std::atomic<uint64_t> done{0};
  std::vector<std::future<ShardInfo>> futures;
  for (int s = 0; s < n; ++s) {
    futures.push_back(pool.submit([&, s] { return write_shard(source, dealt[s], shard_name(options, s, n), options, done); }));
  }
  ConvertSummary summary;
  for (auto& f : futures) {
    while (f.wait_for(std::chrono::milliseconds(200)) != std::future_status::ready) {
      if (options.progress) options.progress(done.load(), source.size());
    }
  }
  for (auto& f : futures) summary.shards.push_back(f.get());  // rethrows a shard's error
  if (options.progress) options.progress(done.load(), source.size());
  for (const ShardInfo& s : summary.shards) {
    summary.records += s.records;
    summary.bytes += s.bytes;
  }
  if (!source.labelled()) return summary;
  for (size_t i = 0; i < source.size(); ++i) ++summary.records_per_class[source.label(i)];
  for (const auto& [label, count] : summary.records_per_class) summary.class_names[label] = source.class_name(label);
  return summary;
}

}  // namespace tandem::data
