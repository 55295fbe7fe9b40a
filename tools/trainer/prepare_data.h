// `prepare:` in a config: when the TFRecords a data section names are missing and the config
// says where they come from, convert them once (and say so); otherwise name the command to run.
#pragma once

#include "tools/trainer/run_config.h"

namespace tandem::tools {

void ensure_data(const RunConfig& config);

}  // namespace tandem::tools
