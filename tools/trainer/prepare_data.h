// `prepare:` in a config: when the TFRecords a data section names are missing and the config
// says where they come from, convert them once (and say so); otherwise name the command to run.
#pragma once

#include "engine/core/yaml_walk.h"
#include "engine/train/config.h"
#include "tools/trainer/run_config.h"

namespace tandem::tools {

// The `prepare` section's keys, with the sources this file can prepare: none, fashion-mnist,
// mnist (Debian's IDX files) and the packaged texts of prepare_data_text.h (bible-kjv). It
// takes the place of the section's entry that add_train_keys made.
void add_prepare_keys(train::PrepareConfig& config, yaml::Keys& keys);

void ensure_data(const RunConfig& config);

}  // namespace tandem::tools
