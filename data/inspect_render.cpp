// The text and JSON forms of inspect's report. JSON conventions (the issue's): int64 values
// as decimal strings, bytes as base64, floats as numbers or "NaN"/"Infinity"/"-Infinity".
#include <fmt/format.h>

#include "data/inspect.h"
#include "data/json_writer.h"

namespace tandem::data {

namespace {

void write_values(JsonWriter& w, const Feature& f) {
  w.begin_object().key("type").string(feature_type_name(f.type)).key("values").begin_array();
  for (const std::string& b : f.bytes) w.string(base64_encode(b));
  for (float v : f.floats) w.float_value(v);
  for (int64_t v : f.ints) w.string(std::to_string(v));
  w.end_array().end_object();
}

void write_key_stats(JsonWriter& w, const KeyStats& s) {
  w.begin_object().key("types").begin_array();
  for (FeatureType t : s.types) w.string(feature_type_name(t));
  w.end_array().key("records_with_key").number(s.records_with_key).key("values").number(s.values);
  if (s.float_count > 0 && s.types.count(FeatureType::kFloat)) {
    w.key("min").float_value(s.float_min).key("max").float_value(s.float_max);
  } else if (s.int_count > 0) {
    w.key("min").string(std::to_string(s.int_min)).key("max").string(std::to_string(s.int_max));
  } else {
    w.key("min").null().key("max").null();
  }
  if (s.types.count(FeatureType::kBytes)) w.key("bytes_total_len").number(s.bytes_total_len);
  if (s.float_nan > 0) w.key("float_nan").number(s.float_nan);
  if (s.steps > 0) w.key("steps").number(s.steps);
  w.end_object();
}

void write_record(JsonWriter& w, const DumpedRecord& d) {
  w.begin_object();
  if (!d.parse_error.empty()) {
    w.key("kind").string("other").key("index").number(d.index).key("size").number(d.size);
    w.key("parse_error").string(d.parse_error).end_object();
    return;
  }
  w.key("kind").string(message_kind_name(d.record.kind)).key("index").number(d.index);
  w.key("features").begin_object();
  for (const auto& [key, f] : d.record.features) {
    w.key(key);
    write_values(w, f);
  }
  w.end_object().key("feature_lists").begin_object();
  for (const auto& [key, steps] : d.record.feature_lists) {
    w.key(key).begin_array();
    for (const Feature& f : steps) write_values(w, f);
    w.end_array();
  }
  w.end_object().end_object();
}

void write_file(JsonWriter& w, const FileReport& r) {
  w.begin_object().key("path").string(r.path).key("compression").string(compression_name(r.compression));
  w.key("num_records").number(r.num_records).key("kind");
  if (r.kind().empty()) {
    w.null();
  } else {
    w.string(r.kind());
  }
  w.key("features").begin_object();
  for (const auto& [key, s] : r.stats.features) {
    w.key(key);
    write_key_stats(w, s);
  }
  w.end_object().key("feature_lists").begin_object();
  for (const auto& [key, s] : r.stats.feature_lists) {
    w.key(key);
    write_key_stats(w, s);
  }
  w.end_object();
  if (r.other_records > 0) w.key("other_records").number(r.other_records).key("parse_error").string(r.first_parse_error);
  w.key("records").begin_array();
  for (const DumpedRecord& d : r.records) write_record(w, d);
  w.end_array().key("error");
  if (!r.error) {
    w.null();
  } else {
    w.begin_object().key("message").string(r.error->message).key("offset");
    r.error->offset ? w.number(*r.error->offset) : w.null();
    w.key("record");
    r.error->record ? w.number(*r.error->record) : w.null();
    w.end_object();
  }
  w.end_object();
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
  JsonWriter w;
  w.begin_object().key("files").begin_array();
  for (const FileReport& r : reports) write_file(w, r);
  w.end_array().end_object();
  return w.str() + "\n";
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
