// `trainer convert`: raw data (IDX, CSV, an image folder, text) to sharded TFRecords. The shard
// count defaults to cores x GPUs (GPUs counted from /proc/driver/nvidia/gpus, no CUDA linked).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "data/convert/convert.h"
#include "data/convert/text.h"
#include "engine/core/context.h"
#include "engine/core/error.h"
#include "tools/trainer/convert_options.h"
#include "tools/trainer/verbs.h"

namespace tandem::tools {

namespace {

struct ConvertArgs {
  std::string source, output, prefix = "data", images, labels, csv, label_column, folder;
  std::vector<std::string> column_types;
  std::vector<std::string> inputs;  // text
  int64_t block_size = 256, stride = 0;
  double validation_fraction = 0.1;
  std::string val_prefix = "val";
  std::string shard_size = "128MB", compression = "none";
  int min_shards = 0, gpus = -1, threads = 0;
  uint64_t seed = 0;
  bool index = false;
  bool overwrite = false;
  bool prefix_given = false, seed_given = false;  // set from the parsed command line
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

data::ConvertOptions shard_options(const ConvertArgs& a, int gpus) {
  data::ConvertOptions o;
  o.output_dir = a.output;
  o.prefix = a.prefix;
  o.target_shard_bytes = parse_byte_size(a.shard_size);
  o.compression = data::parse_compression(a.compression);
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
  return o;
}

void print_text_split(const data::TextSplitSummary& split) {
  const data::TextWindows& w = split.windows;
  fmt::print("  {}: bytes {} to {} of the text ({} bytes): {} windows, {} tokens, {} bytes at the end in no window; "
             "{} shard{}, {} bytes\n",
             split.prefix, w.first_byte, w.first_byte + w.bytes, w.bytes, w.count, w.tokens(), w.unused_bytes(),
             split.files.shards.size(), split.files.shards.size() == 1 ? "" : "s", split.files.bytes);
  for (const data::ShardInfo& shard : split.files.shards) {
    fmt::print("    {}  {} windows  {} bytes\n", std::filesystem::path(shard.path).filename().string(), shard.records,
               shard.bytes);
  }
}

void print_text_summary(const data::TextConvertSummary& s, const data::ConvertOptions& o, const ConvertArgs& a) {
  const data::TextWindows& w = s.train.windows;
  fmt::print("wrote {} bytes of text from {} file{} ({} not valid UTF-8) as windows of {} byte tokens (block size {}, "
             "stride {}; vocabulary 256) to {} ({})\n",
             s.text_bytes, s.files.size(), s.files.size() == 1 ? "" : "s", s.invalid_utf8_bytes, w.length,
             s.block_size, w.stride, o.output_dir, data::compression_name(o.compression));
  fmt::print("  training windows: {}\n", a.seed_given ? fmt::format("shuffled over the shards with seed {}", a.seed)
                                                       : std::string("in text order (give --seed to shuffle them)"));
  print_text_split(s.train);
  if (s.val) {
    print_text_split(*s.val);
  } else {
    fmt::print("  no validation split (--validation-fraction 0)\n");
  }
}

int run_convert_text(const ConvertArgs& a, const data::ConvertOptions& o) {
  data::TextConvertOptions t;
  t.inputs = a.inputs;
  t.block_size = a.block_size;
  t.stride = a.stride;
  t.validation_fraction = a.validation_fraction;
  t.train_prefix = a.prefix_given ? a.prefix : "train";
  t.val_prefix = a.val_prefix;
  if (a.seed_given) t.shuffle_seed = a.seed;
  t.convert = o;
  print_text_summary(data::convert_text(t), o, a);
  return 0;
}

int run_convert(const ConvertArgs& a) {
  int gpus = a.gpus >= 0 ? a.gpus : detect_gpu_count();
  data::ConvertOptions o = shard_options(a, gpus);
  o.overwrite = a.overwrite;
  if (a.source == "text") {
    if (a.inputs.empty()) throw CLI::ValidationError("--source text", "needs --input FILE (or a glob)");
    return run_convert_text(a, o);
  }
  auto source = open_source(a);
  data::ConvertSummary summary = data::convert(*source, o);
  print_summary(summary, o, std::max(1, gpus));
  return 0;
}

}  // namespace

void add_convert_verb(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* verb = app.add_subcommand("convert", "Turn raw data (IDX, CSV, image folder, text) into sharded TFRecords");
  verb->add_option("--source", a->source, "idx, csv, images or text")
      ->required()
      ->check(CLI::IsMember({"idx", "csv", "images", "text"}));
  verb->add_option("--output,-o", a->output, "Output folder")->required();
  CLI::Option* prefix = verb->add_option(
      "--prefix", a->prefix, "Shard name prefix: PREFIX-00000-of-00012.tfrecord (default data; train for text)");
  verb->add_option("--images", a->images, "IDX image file (gzipped or not)");
  verb->add_option("--labels", a->labels, "IDX label file (gzipped or not)");
  verb->add_option("--csv", a->csv, "CSV file with a header line");
  verb->add_option("--label", a->label_column, "The CSV column that holds the class");
  verb->add_option("--column-type", a->column_types, "NAME=int64|float|bytes for a CSV column (else inferred)");
  verb->add_option("--folder", a->folder, "Image folder with one sub-folder per class");
  verb->add_option("--input", a->inputs, "Text file or glob, repeatable: concatenated in order, bytes are tokens");
  verb->add_option("--block-size", a->block_size, "Text: tokens a model sees at once; windows hold one more (256)");
  verb->add_option("--stride", a->stride, "Text: tokens from one window's start to the next (default: block size)");
  verb->add_option("--validation-fraction", a->validation_fraction,
                   "Text: the share of the text, from its end, for validation (0.1; 0: none)");
  verb->add_option("--val-prefix", a->val_prefix, "Text: shard name prefix of the validation split (val)");
  verb->add_option("--shard-size", a->shard_size, "Target shard size, e.g. 128MB, 1GiB, 500000");
  verb->add_option("--min-shards", a->min_shards, "At least this many shards (default: cores x GPUs)");
  verb->add_option("--gpus", a->gpus, "GPUs for the default shard count (default: detected, at least 1)");
  CLI::Option* seed = verb->add_option("--seed", a->seed, "Seed of the record shuffle (text: unshuffled without it)");
  verb->add_option("--compression", a->compression, "none or gzip")->check(CLI::IsMember({"none", "gzip", "zlib"}));
  verb->add_option("--threads", a->threads, "Shards written at once (default: cores)")
      ->check(CLI::Range(0, 1024));  // 100,000 once aborted the process starting them
  verb->add_flag("--index", a->index, "Also write a DALI-style .idx file beside each uncompressed shard");
  verb->add_flag("--overwrite", a->overwrite,
                 "Delete the shards an earlier convert with this prefix left in the folder");
  verb->callback([a, prefix, seed, &exit_code] {
    a->prefix_given = prefix->count() > 0;
    a->seed_given = seed->count() > 0;
    exit_code = run_convert(*a);
  });
}

}  // namespace tandem::tools
