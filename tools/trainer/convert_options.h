// Option parsing for `trainer convert`: byte sizes with units, CSV column types, and the
// GPU count that sets the default number of shards.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/example.h"

namespace tandem::tools {

// "128MB", "64M", "1GiB", "500000": decimal (KB, MB, GB) and binary (KiB, MiB, GiB) units.
uint64_t parse_byte_size(const std::string& text);
// "name=int64" items; throws CLI::ValidationError for anything else.
std::map<std::string, data::FeatureType> parse_column_types(const std::vector<std::string>& items);
// NVIDIA GPUs the driver lists in /proc/driver/nvidia/gpus; 0 where there is no driver.
int detect_gpu_count();

}  // namespace tandem::tools
