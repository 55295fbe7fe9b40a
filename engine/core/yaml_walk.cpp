#include "engine/core/yaml_walk.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "engine/core/suggest.h"

namespace tandem::yaml {
namespace {

// An override's value is a key's value: a few nodes. YAML aliases repeat a node without copying
// it, so a short text can stand for billions of nodes ("billion laughs"); the copy stops here.
constexpr int64_t kMaxOverrideNodes = 100000;

// A copy of node built from plain values, so it has no source mark. `budget` counts nodes left.
YAML::Node without_marks(const YAML::Node& node, int64_t& budget) {
  TANDEM_CHECK(--budget >= 0, ErrorCode::kInvalidArgument,
               "--set: the value expands to more than {} YAML nodes (aliases such as *a repeat a node); give the "
               "value itself", kMaxOverrideNodes);
  if (node.IsSequence()) {
    YAML::Node out(YAML::NodeType::Sequence);
    for (const auto& item : node) out.push_back(without_marks(item, budget));
    return out;
  }
  if (node.IsMap()) {
    YAML::Node out(YAML::NodeType::Map);
    for (const auto& item : node) {
      out[scalar<std::string>(item.first, "override", "a key name")] = without_marks(item.second, budget);
    }
    return out;
  }
  if (node.IsNull()) return YAML::Node(YAML::NodeType::Null);
  return YAML::Node(node.Scalar());
}

// yaml-cpp nodes are handles and `a = b` on a live handle overwrites a's node, so the walk down
// passes fresh handles by value instead of re-pointing one variable.
void set_path(YAML::Node node, const std::vector<std::string>& parts, size_t i, const YAML::Node& value) {
  if (i + 1 == parts.size()) {
    node[parts[i]] = value;
    return;
  }
  if (!node[parts[i]].IsMap()) node[parts[i]] = YAML::Node(YAML::NodeType::Map);
  set_path(node[parts[i]], parts, i + 1, value);
}

}  // namespace

std::string where(const YAML::Node& node, const std::string& path) {
  if (node.Mark().line < 0) return fmt::format("{} (set on the command line)", path);
  return fmt::format("{} (line {})", path, node.Mark().line + 1);
}

bool as_bool(const YAML::Node& node, const std::string& path) { return scalar<bool>(node, path, "true or false"); }

std::string as_string(const YAML::Node& node, const std::string& path) {
  return scalar<std::string>(node, path, "a string");
}

int64_t as_int(const YAML::Node& node, const std::string& path, int64_t min) {
  auto v = scalar<int64_t>(node, path, "an integer");
  TANDEM_CHECK(v >= min, ErrorCode::kInvalidArgument, "{}: must be at least {}, got {}", where(node, path), min, v);
  return v;
}

int64_t as_int_in(const YAML::Node& node, const std::string& path, int64_t min, int64_t max) {
  auto v = scalar<int64_t>(node, path, "an integer");
  TANDEM_CHECK(v >= min && v <= max, ErrorCode::kInvalidArgument, "{}: must be in [{}, {}], got {}", where(node, path),
               min, max, v);
  return v;
}

double as_number(const YAML::Node& node, const std::string& path, double min, double max) {
  auto v = scalar<double>(node, path, "a number");
  TANDEM_CHECK(v >= min && v <= max, ErrorCode::kInvalidArgument, "{}: must be in [{}, {}], got {}",
               where(node, path), min, max, v);
  return v;
}

std::vector<double> as_numbers(const YAML::Node& node, const std::string& path, size_t count) {
  TANDEM_CHECK(node.IsSequence() && (count == 0 || node.size() == count), ErrorCode::kInvalidArgument,
               "{}: expected a list of {} numbers", where(node, path), count == 0 ? "" : std::to_string(count));
  std::vector<double> out;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string item = fmt::format("{}[{}]", path, i);
    out.push_back(scalar<double>(node[i], item, "a number"));
    // .nan and .inf are YAML numbers, but no list of numbers in a config means them.
    TANDEM_CHECK(std::isfinite(out.back()), ErrorCode::kInvalidArgument, "{}: expected a finite number, got {}",
                 where(node[i], item), node[i].Scalar());
  }
  return out;
}

std::vector<int64_t> as_ints(const YAML::Node& node, const std::string& path, int64_t min) {
  TANDEM_CHECK(node.IsSequence(), ErrorCode::kInvalidArgument, "{}: expected a list of integers", where(node, path));
  std::vector<int64_t> out;
  for (size_t i = 0; i < node.size(); ++i) out.push_back(as_int(node[i], fmt::format("{}[{}]", path, i), min));
  return out;
}

std::vector<std::string> as_strings(const YAML::Node& node, const std::string& path) {
  if (!node.IsSequence()) return {as_string(node, path)};
  std::vector<std::string> out;
  for (size_t i = 0; i < node.size(); ++i) out.push_back(as_string(node[i], fmt::format("{}[{}]", path, i)));
  return out;
}

void walk(const YAML::Node& node, const std::string& path, const Keys& keys) {
  if (node.IsNull()) return;  // "section:" with nothing under it keeps every default
  TANDEM_CHECK(node.IsMap(), ErrorCode::kInvalidArgument, "{}: expected a mapping of keys", where(node, path));
  std::vector<std::string> known;
  for (const auto& [k, h] : keys) known.push_back(k);
  std::map<std::string, YAML::Mark> seen;  // yaml-cpp keeps both of a duplicated key: refuse it
  for (const auto& item : node) {
    // A key must be a plain name: YAML allows a list or a mapping as a key ("? [a, b]: 1").
    const std::string key = scalar<std::string>(item.first, path.empty() ? "(top level)" : path, "a key name");
    std::string key_path = path.empty() ? key : path + "." + key;
    auto [first, fresh] = seen.emplace(key, item.first.Mark());
    TANDEM_CHECK(fresh, ErrorCode::kInvalidArgument, "{}: '{}' is given twice (first at line {}); keep one of them",
                 where(item.first, key_path), key, first->second.line + 1);
    auto it = keys.find(key);
    TANDEM_CHECK(it != keys.end(), ErrorCode::kInvalidArgument, "{}: unknown key{}; known keys here: {}",
                 where(item.first, key_path), did_you_mean(key, known), fmt::join(known, ", "));
    it->second(item.second, key_path);
  }
}

YAML::Node load(const std::string& text, const std::string& source) {
  // yaml-cpp stops reading at a NUL byte and reports whatever it then finds; name the byte instead.
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    const auto line = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n') + 1;
    throw_error(ErrorCode::kInvalidArgument,
                "{} (line {}): a NUL byte at offset {}: a config is text (is this a binary or a damaged file?)",
                source, line, nul);
  }
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // "bad file" is yaml-cpp's word for nesting deeper than it will parse, or brackets never closed.
    const std::string why = e.msg == "bad file" ? "nesting too deep, or a bracket never closed" : e.msg;
    throw_error(ErrorCode::kInvalidArgument, "{} (line {}, column {}): invalid YAML: {}", source, e.mark.line + 1,
                e.mark.column + 1, why);
  }
}

YAML::Node load_file(const std::string& path) {
  std::ifstream in(path);
  TANDEM_CHECK(in.good(), ErrorCode::kNotFound, "config {}: cannot open it (does the file exist?)", path);
  std::stringstream text;
  text << in.rdbuf();
  return load(text.str(), path);
}

void apply_override(YAML::Node& root, const std::string& assignment) {
  auto eq = assignment.find('=');
  TANDEM_CHECK(eq != std::string::npos && eq > 0, ErrorCode::kInvalidArgument,
               "--set '{}': expected key.path=value", assignment);
  std::string path = assignment.substr(0, eq);
  int64_t budget = kMaxOverrideNodes;
  YAML::Node value = without_marks(load(assignment.substr(eq + 1), "--set " + path), budget);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  set_path(root, parts, 0, value);
}

}  // namespace tandem::yaml
