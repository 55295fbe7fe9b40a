// The text and JSON forms of inspect's report. JSON conventions (the issue's): int64 values
// as decimal strings, bytes as base64, floats as numbers or "NaN"/"Infinity"/"-Infinity".
#include <fmt/format.h>

#include "data/inspect.h"
#include "data/json_values.h"

namespace tandem::data {

namespace {

using Json = nlohmann::ordered_json;

Json values_json(const Feature& f) {
  Json values = Json::array();
  for (const std::string& b : f.bytes) values.push_back(base64_encode(b));
  for (float v : f.floats) values.push_back(float32_json(v));
  for (int64_t v : f.ints) values.push_back(std::to_string(v));  // a double cannot hold every int64
  return Json{{"type", feature_type_name(f.type)}, {"values", std::move(values)}};
}

Json key_stats_json(const KeyStats& s) {
  Json types = Json::array();
  for (FeatureType t : s.types) types.push_back(feature_type_name(t));
  Json out{{"types", std::move(types)}, {"records_with_key", s.records_with_key}, {"values", s.values}};
  if (s.float_count > 0 && s.types.count(FeatureType::kFloat)) {
    out["min"] = float32_json(static_cast<float>(s.float_min));
    out["max"] = float32_json(static_cast<float>(s.float_max));
  } else if (s.int_count > 0) {
    out["min"] = std::to_string(s.int_min);
    out["max"] = std::to_string(s.int_max);
  } else {
    out["min"] = nullptr;
    out["max"] = nullptr;
  }
  if (s.types.count(FeatureType::kBytes)) out["bytes_total_len"] = s.bytes_total_len;
  if (s.float_nan > 0) out["float_nan"] = s.float_nan;
  if (s.steps > 0) out["steps"] = s.steps;
  return out;
}

Json record_json(const DumpedRecord& d) {
  if (!d.parse_error.empty()) {
    return Json{{"kind", "other"}, {"index", d.index}, {"size", d.size}, {"parse_error", d.parse_error}};
  }
  Json features = Json::object();
  for (const auto& [key, f] : d.record.features) features[key] = values_json(f);
  Json lists = Json::object();
  for (const auto& [key, steps] : d.record.feature_lists) {
    Json list = Json::array();
    for (const Feature& f : steps) list.push_back(values_json(f));
    lists[key] = std::move(list);
  }
  return Json{{"kind", message_kind_name(d.record.kind)}, {"index", d.index}, {"features", std::move(features)},
              {"feature_lists", std::move(lists)}};
}

Json stats_json(const std::map<std::string, KeyStats>& keys) {
  Json out = Json::object();
  for (const auto& [key, s] : keys) out[key] = key_stats_json(s);
  return out;
}

Json error_json(const std::optional<InspectError>& e) {
  if (!e) return nullptr;
  return Json{{"message", e->message},
              {"offset", e->offset ? Json(*e->offset) : Json(nullptr)},
              {"record", e->record ? Json(*e->record) : Json(nullptr)}};
}

Json file_json(const FileReport& r) {
  Json out{{"path", r.path}, {"compression", compression_name(r.compression)}, {"num_records", r.num_records},
           {"kind", r.kind().empty() ? Json(nullptr) : Json(r.kind())}, {"features", stats_json(r.stats.features)},
           {"feature_lists", stats_json(r.stats.feature_lists)}};
  if (r.other_records > 0) {
    out["other_records"] = r.other_records;
    out["parse_error"] = r.first_parse_error;
  }
  Json records = Json::array();
  for (const DumpedRecord& d : r.records) records.push_back(record_json(d));
  out["records"] = std::move(records);
  out["error"] = error_json(r.error);
  return out;
}

// Bytes for a terminal: printable ASCII as is, the rest as \xNN, long values cut.
std::string printable(std::string_view b) {
  std::string out = "\"";
  for (size_t i = 0; i < b.size() && i < 48; ++i) {
    unsigned char c = static_cast<unsigned char>(b[i]);
    out += (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  }
  out += "\"";
  if (b.size() > 48) out += fmt::format("... ({} bytes)", b.size());
  return out;
}

std::string text_values(const Feature& f) {
  std::vector<std::string> parts;
  for (const std::string& b : f.bytes) parts.push_back(printable(b));
  for (float v : f.floats) parts.push_back(fmt::format("{}", v));
  for (int64_t v : f.ints) parts.push_back(std::to_string(v));
  if (parts.size() > 12) {
    size_t total = parts.size();
    parts.resize(12);
    parts.push_back(fmt::format("... ({} values)", total));
  }
  return fmt::format("{} [{}]", feature_type_name(f.type), fmt::join(parts, ", "));
}

std::string text_stats_row(const std::string& key, const KeyStats& s) {
  std::vector<std::string_view> types;
  for (FeatureType t : s.types) types.push_back(feature_type_name(t));
  std::string min = "-", max = "-";
  if (s.float_count > 0 && s.types.count(FeatureType::kFloat)) {
    min = fmt::format("{}", static_cast<float>(s.float_min));
    max = fmt::format("{}", static_cast<float>(s.float_max));
  } else if (s.int_count > 0) {
    min = std::to_string(s.int_min);
    max = std::to_string(s.int_max);
  }
  return fmt::format("    {:<32} {:<12} {:>9} {:>11} {:>14} {:>14}\n", key, fmt::join(types, ","), s.records_with_key,
                     s.values, min, max);
}

}  // namespace

std::string render_json(const std::vector<FileReport>& reports) {
  Json files = Json::array();
  for (const FileReport& r : reports) files.push_back(file_json(r));
  // One line for scripts; feature names are not checked UTF-8, so bad bytes print as U+FFFD.
  return Json{{"files", std::move(files)}}.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string render_text(const FileReport& r) {
  std::string out = fmt::format("{}\n  compression: {}  records: {}  kind: {}\n", r.path, compression_name(r.compression),
                                r.num_records, r.kind().empty() ? "-" : r.kind());
  if (r.other_records > 0) {
    out += fmt::format("  {} record(s) are not tf.Example/SequenceExample; first: {}\n", r.other_records, r.first_parse_error);
  }
  auto table = [&](const char* title, const std::map<std::string, KeyStats>& keys) {
    if (keys.empty()) return;
    out += fmt::format("  {}:\n    {:<32} {:<12} {:>9} {:>11} {:>14} {:>14}\n", title, "key", "types", "records",
                       "values", "min", "max");
    for (const auto& [key, s] : keys) out += text_stats_row(key, s);
  };
  table("features", r.stats.features);
  table("feature_lists", r.stats.feature_lists);
  for (const DumpedRecord& d : r.records) {
    if (!d.parse_error.empty()) {
      out += fmt::format("  record {} (other, {} bytes): {}\n", d.index, d.size, d.parse_error);
      continue;
    }
    out += fmt::format("  record {} ({}):\n", d.index, message_kind_name(d.record.kind));
    for (const auto& [key, f] : d.record.features) out += fmt::format("    {}: {}\n", key, text_values(f));
    for (const auto& [key, steps] : d.record.feature_lists) {
      for (size_t i = 0; i < steps.size(); ++i) out += fmt::format("    {}[{}]: {}\n", key, i, text_values(steps[i]));
    }
  }
  out += r.error ? fmt::format("  error: {}\n", r.error->message) : "  ok\n";
  return out;
}

}  // namespace tandem::data
