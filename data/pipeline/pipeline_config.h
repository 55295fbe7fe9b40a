// PipelineConfig: the typed `data:` section of a training config, every key with a documented
// default (docs/PIPELINE.md). The later config system reuses the struct and this parser; for now
// `trainer bench-input` reads it directly. Unknown keys are errors with path, line, did-you-mean.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/compression.h"
#include "data/pipeline/dataset.h"
#include "data/pipeline/image_map.h"
#include "data/pipeline/sharding.h"
#include "data/pipeline/token_map.h"
#include "data/tfrecord_reader.h"

namespace tandem::data {

struct PipelineConfig {
  std::vector<std::string> files;  // glob patterns of TFRecord files (required)
  Compression compression = Compression::kAuto;
  OnCorrupt on_corrupt = OnCorrupt::kFail;
  int64_t max_record_mb = 256;  // a record claiming more is a damaged length (TFRecordReaderOptions)
  ShardPolicy shard_policy = ShardPolicy::kAuto;
  bool count_records = true;  // count records for the plan log and auto's balance test

  int64_t cycle_length = kAutotune;  // interleave: files read at once
  int64_t block_length = 1;
  int64_t num_parallel_reads = kAutotune;  // interleave num_parallel_calls
  bool deterministic = true;

  int64_t shuffle_buffer = 10000;  // 0: no shuffle
  uint64_t seed = 0;
  bool reshuffle_each_iteration = true;

  int64_t num_parallel_calls = kAutotune;  // the decode + augment map
  bool cache = false;                      // keep this replica's records in memory after epoch 1
  std::string cache_file;                  // non-empty: cache in files "<cache_file>.replica-R-of-N.<crc>"
  int64_t batch_size = 32;                 // per replica, unless global_batch_size is given
  int64_t global_batch_size = 0;           // > 0: split evenly over the replicas instead
  bool drop_remainder = true;
  int64_t prefetch = kAutotune;

  // What the records hold: images and labels (`image:`, also when neither section is given), or
  // windows of tokens for a language model (`tokens:`); a data section gives one of them.
  ImageMapOptions image;  // keys, format and augmentation (seed and replica are set per replica)
  std::optional<TokenMapOptions> tokens;

  int cpu_threads = 0;        // CPU budget of all replicas' loaders; 0: the cores
  int64_t memory_budget_mb = 0;  // for all queues of all replicas; 0: half of RAM
};

// Reads one data section (the node under `data:` or `eval_data:`); path names it in errors.
PipelineConfig parse_pipeline_section(const YAML::Node& node, const std::string& path);

// Parses the mapping under `section` ("data") of a YAML document; other sections are ignored.
PipelineConfig parse_pipeline_config(const std::string& yaml_text, const std::string& section = "data");
PipelineConfig load_pipeline_config(const std::string& path, const std::string& section = "data");

// Each replica's batch: global_batch_size / replicas when given (an error naming both numbers
// and the nearest valid choices when it does not divide), else batch_size.
int64_t replica_batch_size(const PipelineConfig& config, int replicas);

}  // namespace tandem::data
