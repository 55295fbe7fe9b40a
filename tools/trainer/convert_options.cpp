// convert's option parsers. The GPU count reads the driver's /proc listing so the trainer
// needs no CUDA library to pick a shard count.
#include "tools/trainer/convert_options.h"

#include <CLI/CLI.hpp>

#include <cctype>
#include <filesystem>

namespace tandem::tools {

uint64_t parse_byte_size(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw CLI::ValidationError("--shard-size", "expects a size such as 128MB, got '" + text + "'");
  }
  std::string unit = text.substr(used);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, double> kUnits = {
      {"", 1}, {"B", 1}, {"K", 1e3}, {"KB", 1e3}, {"M", 1e6}, {"MB", 1e6}, {"G", 1e9}, {"GB", 1e9},
      {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end() || value <= 0) {
    throw CLI::ValidationError("--shard-size", "expects a positive size such as 128MB or 1GiB, got '" + text + "'");
  }
  return static_cast<uint64_t>(value * it->second);
}

std::map<std::string, data::FeatureType> parse_column_types(const std::vector<std::string>& items) {
  std::map<std::string, data::FeatureType> out;
  for (const std::string& item : items) {
    size_t eq = item.rfind('=');
    std::string type = eq == std::string::npos ? "" : item.substr(eq + 1);
    data::FeatureType t;
    if (type == "int64") {
      t = data::FeatureType::kInt64;
    } else if (type == "float") {
      t = data::FeatureType::kFloat;
    } else if (type == "bytes") {
      t = data::FeatureType::kBytes;
    } else {
      throw CLI::ValidationError("--column-type", "expects NAME=int64|float|bytes, got '" + item + "'");
    }
    out[item.substr(0, eq)] = t;
  }
  return out;
}

int detect_gpu_count() {
  std::error_code ec;
  int n = 0;
  for (std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

}  // namespace tandem::tools
