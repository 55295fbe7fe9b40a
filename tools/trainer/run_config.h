// The whole config file of a run: the training sections (engine/train) and the data sections
// (data/pipeline) read in one strict walk, so an unknown top-level key is an error too.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "data/pipeline/pipeline_config.h"
#include "engine/train/config.h"

namespace tandem::tools {

struct RunConfig {
  std::string path;
  train::TrainConfig train;
  data::PipelineConfig data;                     // the training split
  std::optional<data::PipelineConfig> eval_data; // the evaluation split, when given
  std::string resolved_yaml;                     // the document after --set overrides (distribute.token hidden)
  // What every process of a multi-process run must agree on: a digest of the document without
  // its per-process keys (distribute.process_rank) and the token (compared on its own).
  std::string shared_digest;
};

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);

// The same strict reading of a config held as text (a checkpoint's meta.json keeps the resolved
// config of its run); source names it in errors, as the path does for a file.
RunConfig run_config_from_text(const std::string& text, const std::string& source);

}  // namespace tandem::tools
