// `trainer convert`: raw data (IDX, CSV, an image folder) to sharded TFRecords. The shard
// count defaults to cores x GPUs (GPUs counted from /proc/driver/nvidia/gpus, no CUDA linked).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "data/convert/convert.h"
#include "engine/core/context.h"
#include "engine/core/error.h"
#include "tools/trainer/convert_options.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {

namespace {

struct ConvertArgs {
  std::string source, output, prefix = "data", images, labels, csv, label_column, folder;
  std::vector<std::string> column_types;
  std::string shard_size = "128MB", compression = "none";
  int min_shards = 0, gpus = -1, threads = 0;
  uint64_t seed = 0;
  bool index = false;
};

std::unique_ptr<data::ConvertSource> open_source(const ConvertArgs& a) {
  if (a.source == "idx") {
    if (a.images.empty() || a.labels.empty()) throw CLI::ValidationError("--source idx", "needs --images and --labels");
    return data::open_idx_source(a.images, a.labels);
  }
  if (a.source == "csv") {
    if (a.csv.empty() || a.label_column.empty()) throw CLI::ValidationError("--source csv", "needs --csv and --label");
    data::CsvOptions options;
    options.label_column = a.label_column;
    options.types = parse_column_types(a.column_types);
    return data::open_csv_source(a.csv, options);
  }
  if (a.folder.empty()) throw CLI::ValidationError("--source images", "needs --folder");
  return data::open_image_folder_source(a.folder);
}

void print_summary(const data::ConvertSummary& s, const data::ConvertOptions& o, int gpus) {
  fmt::print("wrote {} records in {} shard{} ({} bytes, {}) to {}\n", s.records, s.shards.size(),
             s.shards.size() == 1 ? "" : "s", s.bytes, data::compression_name(o.compression), o.output_dir);
  fmt::print("  shards: at least {} (cores {} x GPUs {}), target {} bytes each; seed {}\n", o.min_shards,
             available_cores(), gpus, o.target_shard_bytes, o.seed);
  for (const data::ShardInfo& shard : s.shards) {
    fmt::print("  {}  {} records  {} bytes\n", std::filesystem::path(shard.path).filename().string(), shard.records,
               shard.bytes);
  }
  fmt::print("  records per class:\n");
  for (const auto& [label, count] : s.records_per_class) {
    fmt::print("    {:>4}  {:<24} {}\n", label, s.class_names.at(label), count);
  }
}

int run_convert(const ConvertArgs& a) {
  auto source = open_source(a);
  data::ConvertOptions o;
  o.output_dir = a.output;
  o.prefix = a.prefix;
  o.target_shard_bytes = parse_byte_size(a.shard_size);
  o.compression = data::parse_compression(a.compression);
  int gpus = a.gpus >= 0 ? a.gpus : detect_gpu_count();
  o.min_shards = a.min_shards > 0 ? a.min_shards : available_cores() * std::max(1, gpus);
  o.seed = a.seed;
  o.threads = a.threads;
  o.write_index = a.index;
  if (::isatty(::fileno(stderr))) {
    o.progress = [](uint64_t done, uint64_t total) {
      std::fprintf(stderr, "\rconvert: %llu / %llu records (%.0f%%)", static_cast<unsigned long long>(done),
                   static_cast<unsigned long long>(total), total > 0 ? 100.0 * double(done) / double(total) : 100.0);
      if (done == total) std::fputc('\n', stderr);
    };
  }
  data::ConvertSummary summary = data::convert(*source, o);
  print_summary(summary, o, std::max(1, gpus));
  return 0;
}

}  // namespace

void add_convert_verb(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* verb = app.add_subcommand("convert", "Turn raw data (IDX, CSV, image folder) into sharded TFRecords");
  verb->add_option("--source", a->source, "idx, csv or images")->required()->check(CLI::IsMember({"idx", "csv", "images"}));
  verb->add_option("--output,-o", a->output, "Output folder")->required();
  verb->add_option("--prefix", a->prefix, "Shard name prefix: PREFIX-00000-of-00012.tfrecord");
  verb->add_option("--images", a->images, "IDX image file (gzipped or not)");
  verb->add_option("--labels", a->labels, "IDX label file (gzipped or not)");
  verb->add_option("--csv", a->csv, "CSV file with a header line");
  verb->add_option("--label", a->label_column, "The CSV column that holds the class");
  verb->add_option("--column-type", a->column_types, "NAME=int64|float|bytes for a CSV column (else inferred)");
  verb->add_option("--folder", a->folder, "Image folder with one sub-folder per class");
  verb->add_option("--shard-size", a->shard_size, "Target shard size, e.g. 128MB, 1GiB, 500000");
  verb->add_option("--min-shards", a->min_shards, "At least this many shards (default: cores x GPUs)");
  verb->add_option("--gpus", a->gpus, "GPUs for the default shard count (default: detected, at least 1)");
  verb->add_option("--seed", a->seed, "Seed of the record shuffle");
  verb->add_option("--compression", a->compression, "none or gzip")->check(CLI::IsMember({"none", "gzip", "zlib"}));
  verb->add_option("--threads", a->threads, "Shards written at once (default: cores)");
  verb->add_flag("--index", a->index, "Also write a DALI-style .idx file beside each uncompressed shard");
  verb->callback([a, &exit_code] { exit_code = run_convert(*a); });
}

}  // namespace tandem::tools
