// The YAML reader of PipelineConfig: key tables for the strict walker of engine/core, so
// unknown keys, wrong types and bad values name the key path and line.
#include "data/pipeline/pipeline_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/suggest.h"
#include "engine/core/yaml_walk.h"

namespace tandem::data {
namespace {

using yaml::as_bool;
using yaml::scalar;
using yaml::walk;
using yaml::where;

int64_t as_count(const YAML::Node& n, const std::string& p, int64_t min) {
  if (n.IsScalar() && n.Scalar() == "autotune") return kAutotune;
  auto v = scalar<int64_t>(n, p, "an integer or autotune");
  TANDEM_CHECK(v >= min, ErrorCode::kInvalidArgument, "{}: must be >= {} or autotune, got {}", where(n, p), min, v);
  return v;
}

int64_t as_int(const YAML::Node& n, const std::string& p, int64_t min) { return yaml::as_int(n, p, min); }

// An image side or padding: JPEG and PNG sides stop at 65535, and the int fields hold no more.
constexpr int64_t kMaxImageSide = 65535;
int as_side(const YAML::Node& n, const std::string& p, int64_t min) {
  return static_cast<int>(yaml::as_int_in(n, p, min, kMaxImageSide));
}

// A count of threads: 100,000 once aborted the process starting them. No machine this runs on has a
// tenth of kMaxThreads cores; autotune picks what the budget allows.
constexpr int64_t kMaxThreads = 1024;
int64_t as_thread_count(const YAML::Node& n, const std::string& p, int64_t min, bool autotune) {
  const int64_t v = autotune ? as_count(n, p, min) : as_int(n, p, min);
  TANDEM_CHECK(v <= kMaxThreads, ErrorCode::kInvalidArgument, "{}: {} threads is more than the {} this accepts{}",
               where(n, p), v, kMaxThreads, autotune ? "; use autotune" : "; 0 takes the cores this process may use");
  return v;
}

template <typename F>
auto with_path(const YAML::Node& n, const std::string& p, F parse) {
  return yaml::parse_with(n, p, parse);
}

std::vector<float> floats(const YAML::Node& n, const std::string& p, size_t count) {
  std::vector<float> out;
  for (double v : yaml::as_numbers(n, p, count)) out.push_back(static_cast<float>(v));
  return out;
}

yaml::Keys augment_keys(AugmentOptions& a) {
  return {
      {"random_resized_crop", [&](auto& n, auto& p) { a.random_resized_crop = as_bool(n, p); }},
      {"scale", [&](auto& n, auto& p) {
         auto v = floats(n, p, 2);
         a.crop_range.scale_min = v[0];
         a.crop_range.scale_max = v[1];
       }},
      {"ratio", [&](auto& n, auto& p) {
         auto v = floats(n, p, 2);
         a.crop_range.ratio_min = v[0];
         a.crop_range.ratio_max = v[1];
       }},
      {"crop_padding", [&](auto& n, auto& p) { a.crop_padding = as_side(n, p, 0); }},
      {"horizontal_flip", [&](auto& n, auto& p) { a.horizontal_flip = as_bool(n, p); }},
  };
}

yaml::Keys image_keys(ImageMapOptions& im) {
  AugmentOptions& a = im.augment;
  return {
      {"key", [&](auto& n, auto& p) { im.image_key = scalar<std::string>(n, p, "a feature name"); }},
      {"label_key", [&](auto& n, auto& p) { im.label_key = scalar<std::string>(n, p, "a feature name"); }},
      {"format", [&](auto& n, auto& p) { im.format = with_path(n, p, parse_image_format); }},
      {"accept_truncated_jpeg", [&](auto& n, auto& p) { im.accept_truncated_jpeg = as_bool(n, p); }},
      {"raw_shape", [&](auto& n, auto& p) {
         TANDEM_CHECK(n.IsSequence() && n.size() == 3, ErrorCode::kInvalidArgument,
                      "{}: expected [height, width, channels]", where(n, p));
         im.raw_shape.clear();
         for (size_t i = 0; i < 3; ++i) {
           im.raw_shape.push_back(as_side(n[i], fmt::format("{}[{}]", p, i), 1));
         }
       }},
      {"height", [&](auto& n, auto& p) { a.height = as_side(n, p, 0); }},
      {"width", [&](auto& n, auto& p) { a.width = as_side(n, p, 0); }},
      {"channels", [&](auto& n, auto& p) {
         a.channels = static_cast<int>(yaml::as_int_in(n, p, 1, 3));
         TANDEM_CHECK(a.channels != 2, ErrorCode::kInvalidArgument, "{}: images decode to 1 (grey) or 3 (RGB) "
                      "channels, not 2", where(n, p));
       }},
      {"layout", [&](auto& n, auto& p) { a.layout = with_path(n, p, parse_image_layout); }},
      {"normalize", [&](auto& n, auto& p) { a.normalize = as_bool(n, p); }},
      {"mean", [&](auto& n, auto& p) { auto v = floats(n, p, 3); std::copy(v.begin(), v.end(), a.mean.begin()); }},
      {"std", [&](auto& n, auto& p) {
         auto v = floats(n, p, 3);
         for (size_t i = 0; i < v.size(); ++i) {
           // Normalising divides by it: a zero std turns every pixel into inf or NaN.
           TANDEM_CHECK(std::isfinite(v[i]) && v[i] > 0.0f, ErrorCode::kInvalidArgument,
                        "{}: every value must be a positive number (images are divided by it), got {} at index {}",
                        where(n, p), v[i], i);
         }
         std::copy(v.begin(), v.end(), a.std.begin());
       }},
      {"augment", [&](auto& n, auto& p) { walk(n, p, augment_keys(a)); }},
  };
}

yaml::Keys token_keys(TokenMapOptions& t) {
  return {
      {"key", [&](auto& n, auto& p) { t.key = scalar<std::string>(n, p, "a feature name"); }},
      {"length", [&](auto& n, auto& p) { t.length = as_int(n, p, 2); }},
      {"vocab_size", [&](auto& n, auto& p) { t.vocab_size = as_int(n, p, 1); }},
  };
}

// Where the `image` and `tokens` sections were given, for the error when both are.
struct RecordSections {
  std::string image, tokens;
};

yaml::Keys data_keys(PipelineConfig& c, RecordSections& given) {
  return {
      {"files", [&](auto& n, auto& p) {
         c.files.clear();
         if (n.IsSequence()) {
           for (size_t i = 0; i < n.size(); ++i) c.files.push_back(scalar<std::string>(n[i], p, "a glob pattern"));
         } else {
           c.files.push_back(scalar<std::string>(n, p, "a glob pattern or a list of them"));
         }
       }},
      {"compression", [&](auto& n, auto& p) { c.compression = with_path(n, p, parse_compression); }},
      {"on_corrupt", [&](auto& n, auto& p) { c.on_corrupt = with_path(n, p, parse_on_corrupt); }},
      {"max_record_mb",
       [&](auto& n, auto& p) {
         c.max_record_mb = as_int(n, p, 1);
         TANDEM_CHECK(c.max_record_mb <= (int64_t{1} << 30), ErrorCode::kInvalidArgument,
                      "{}: {} MiB is more than a record can hold (at most 1073741824)", where(n, p), c.max_record_mb);
       }},
      {"shard_policy", [&](auto& n, auto& p) { c.shard_policy = with_path(n, p, parse_shard_policy); }},
      {"count_records", [&](auto& n, auto& p) { c.count_records = as_bool(n, p); }},
      {"cycle_length", [&](auto& n, auto& p) { c.cycle_length = as_count(n, p, 1); }},
      {"block_length", [&](auto& n, auto& p) { c.block_length = as_int(n, p, 1); }},
      {"num_parallel_reads", [&](auto& n, auto& p) { c.num_parallel_reads = as_thread_count(n, p, 1, true); }},
      {"deterministic", [&](auto& n, auto& p) { c.deterministic = as_bool(n, p); }},
      {"shuffle_buffer", [&](auto& n, auto& p) { c.shuffle_buffer = as_int(n, p, 0); }},
      {"seed", [&](auto& n, auto& p) { c.seed = static_cast<uint64_t>(as_int(n, p, 0)); }},
      {"reshuffle_each_iteration", [&](auto& n, auto& p) { c.reshuffle_each_iteration = as_bool(n, p); }},
      {"num_parallel_calls", [&](auto& n, auto& p) { c.num_parallel_calls = as_thread_count(n, p, 1, true); }},
      {"cache", [&](auto& n, auto& p) { c.cache = as_bool(n, p); }},
      {"cache_file", [&](auto& n, auto& p) { c.cache_file = scalar<std::string>(n, p, "a file path prefix"); }},
      {"batch_size", [&](auto& n, auto& p) { c.batch_size = as_int(n, p, 1); }},
      {"global_batch_size", [&](auto& n, auto& p) { c.global_batch_size = as_int(n, p, 1); }},
      {"drop_remainder", [&](auto& n, auto& p) { c.drop_remainder = as_bool(n, p); }},
      {"prefetch", [&](auto& n, auto& p) { c.prefetch = as_count(n, p, 0); }},
      {"image", [&](auto& n, auto& p) {
         given.image = where(n, p);
         walk(n, p, image_keys(c.image));
       }},
      {"tokens", [&](auto& n, auto& p) {
         given.tokens = where(n, p);
         walk(n, p, token_keys(c.tokens.emplace()));
         TANDEM_CHECK(c.tokens->length > 0, ErrorCode::kInvalidArgument,
                      "{}.length: required (tokens per record: the block size + 1, e.g. 257)", p);
         TANDEM_CHECK(c.tokens->vocab_size > 0, ErrorCode::kInvalidArgument,
                      "{}.vocab_size: required (256 for the byte-level text of trainer convert --source text)", p);
       }},
      {"cpu_threads", [&](auto& n, auto& p) { c.cpu_threads = static_cast<int>(as_thread_count(n, p, 0, false)); }},
      {"memory_budget_mb", [&](auto& n, auto& p) { c.memory_budget_mb = as_int(n, p, 0); }},
  };
}

}  // namespace

PipelineConfig parse_pipeline_config(const std::string& yaml_text, const std::string& section) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw_error(ErrorCode::kInvalidArgument, "YAML (line {}): {}", e.mark.line + 1, e.msg);
  }
  TANDEM_CHECK(root.IsMap() && root[section], ErrorCode::kInvalidArgument, "config: no '{}' section", section);
  return parse_pipeline_section(root[section], section);
}

PipelineConfig parse_pipeline_section(const YAML::Node& node, const std::string& path) {
  PipelineConfig config;
  RecordSections given;
  walk(node, path, data_keys(config, given));
  TANDEM_CHECK(given.image.empty() || given.tokens.empty(), ErrorCode::kInvalidArgument,
               "{} and {}: a data section's records are either images (image) or token windows (tokens), not both; "
               "remove one",
               given.image, given.tokens);
  TANDEM_CHECK(!config.files.empty(), ErrorCode::kInvalidArgument, "{}.files: required (a glob of TFRecord files)",
               path);
  return config;
}

int64_t replica_batch_size(const PipelineConfig& config, int replicas) {
  if (config.global_batch_size <= 0) return config.batch_size;
  const int64_t global = config.global_batch_size;
  const int64_t r = replicas;
  if (global % r != 0 || global < r) {
    int64_t below = std::max<int64_t>(r, global / r * r);
    throw_error(ErrorCode::kInvalidArgument,
                "data.global_batch_size {} does not divide over {} replicas; nearest valid: {} or {}", global, r,
                below, (global / r + 1) * r);
  }
  return global / r;
}

PipelineConfig load_pipeline_config(const std::string& path, const std::string& section) {
  std::ifstream in(path);
  TANDEM_CHECK(in.good(), ErrorCode::kNotFound, "config {}: cannot open", path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return parse_pipeline_config(text.str(), section);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", path, e.what()));
  }
}

}  // namespace tandem::data
