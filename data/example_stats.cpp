// FileStats: one pass over parsed records; NaNs are counted apart and left out of min, max, sum.
#include "data/example_stats.h"

#include <cmath>

namespace tandem::data {

void KeyStats::add(const Feature& feature) {
  types.insert(feature.type);
  values += feature.size();
  for (const std::string& b : feature.bytes) bytes_total_len += b.size();
  for (float f : feature.floats) {
    if (std::isnan(f)) {
      ++float_nan;
      continue;
    }
    double d = f;
    float_min = float_count == 0 ? d : std::min(float_min, d);
    float_max = float_count == 0 ? d : std::max(float_max, d);
    ++float_count;
    double t = float_sum + d;
    if (std::isinf(t)) {
      float_sum = t;
    } else {
      float_sum_compensation += std::fabs(float_sum) >= std::fabs(d) ? (float_sum - t) + d : (d - t) + float_sum;
      float_sum = t;
    }
  }
  for (int64_t v : feature.ints) {
    int_min = int_count == 0 ? v : std::min(int_min, v);
    int_max = int_count == 0 ? v : std::max(int_max, v);
    ++int_count;
    int_sum += v;
  }
}

void FileStats::add(const ParsedRecord& record) {
  ++num_records;
  kinds.insert(record.kind);
  for (const auto& [key, feature] : record.features) {
    KeyStats& s = features[key];
    ++s.records_with_key;
    s.add(feature);
  }
  for (const auto& [key, steps] : record.feature_lists) {
    KeyStats& s = feature_lists[key];
    ++s.records_with_key;
    s.steps += steps.size();
    for (const Feature& step : steps) s.add(step);
  }
}

std::string FileStats::kind_name() const {
  if (kinds.empty()) return "-";
  std::string out;
  for (MessageKind k : kinds) {
    if (!out.empty()) out += "+";
    out += message_kind_name(k);
  }
  return out;
}

std::string int128_to_string(Int128 v) {
  if (v == 0) return "0";
  bool negative = v < 0;
  UInt128 u = negative ? -static_cast<UInt128>(v) : static_cast<UInt128>(v);
  std::string digits;
  while (u > 0) {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  return negative ? "-" + digits : digits;
}

}  // namespace tandem::data
