// Strict reading of YAML configs: a walker that knows each mapping's keys, so an unknown key
// (with a "did you mean"), a wrong type or a bad value is an error giving the key path and
// the line. Values set on the command line (--set) carry no line and say so instead.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/error.h"

namespace tandem::yaml {

// "train.global_batch_size (line 12)", or "(set on the command line)" for an override.
std::string where(const YAML::Node& node, const std::string& path);

template <typename T>
T scalar(const YAML::Node& node, const std::string& path, std::string_view what) {
  TANDEM_CHECK(node.IsScalar(), ErrorCode::kInvalidArgument, "{}: expected {}", where(node, path), what);
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    throw_error(ErrorCode::kInvalidArgument, "{}: expected {}, got '{}'", where(node, path), what, node.Scalar());
  }
}

bool as_bool(const YAML::Node& node, const std::string& path);
std::string as_string(const YAML::Node& node, const std::string& path);
int64_t as_int(const YAML::Node& node, const std::string& path, int64_t min);
// An integer in [min, max]: what a narrower field (an int, a size) can hold is checked here, never
// wrapped by a cast (4294967324 read into an int is 28).
int64_t as_int_in(const YAML::Node& node, const std::string& path, int64_t min, int64_t max);
double as_number(const YAML::Node& node, const std::string& path, double min, double max);
// A list of exactly `count` finite numbers (count 0: any length).
std::vector<double> as_numbers(const YAML::Node& node, const std::string& path, size_t count = 0);
std::vector<int64_t> as_ints(const YAML::Node& node, const std::string& path, int64_t min);
// One string, or a list of strings.
std::vector<std::string> as_strings(const YAML::Node& node, const std::string& path);

// Runs parse(text) on a scalar and puts the key path and line in front of its error.
template <typename F>
auto parse_with(const YAML::Node& node, const std::string& path, F parse) {
  std::string text = scalar<std::string>(node, path, "a string");
  try {
    return parse(text);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", where(node, path), e.what()));
  }
}

using Handler = std::function<void(const YAML::Node& value, const std::string& path)>;
using Keys = std::map<std::string, Handler>;

// Calls the handler of each key of the mapping; an unknown key is an error with a suggestion.
void walk(const YAML::Node& node, const std::string& path, const Keys& keys);

// Parses YAML text; a syntax error names the source and line.
YAML::Node load(const std::string& text, const std::string& source);
YAML::Node load_file(const std::string& path);

// Applies "a.b.c=value" to the tree: value is read as YAML (a number, a string, a list...),
// intermediate mappings are created. The new nodes carry no line, so errors say where they came from.
void apply_override(YAML::Node& root, const std::string& assignment);

}  // namespace tandem::yaml
