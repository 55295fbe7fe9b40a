// Per-key statistics over the records of a file, as `trainer inspect` prints them: types
// seen, records holding the key, total values, min and max, sums (compensated for floats).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "data/example.h"

namespace tandem::data {

// int64 sums can pass 2^63; GCC's 128-bit integer holds any sum of 2^64 values.
__extension__ using Int128 = __int128;
__extension__ using UInt128 = unsigned __int128;

struct KeyStats {
  std::set<FeatureType> types;
  uint64_t records_with_key = 0;
  uint64_t values = 0;
  uint64_t steps = 0;  // feature_lists only: steps over all records
  uint64_t bytes_total_len = 0;
  uint64_t float_count = 0, float_nan = 0;
  double float_min = 0, float_max = 0;
  double float_sum = 0, float_sum_compensation = 0;  // Neumaier summation
  uint64_t int_count = 0;
  int64_t int_min = 0, int_max = 0;
  Int128 int_sum = 0;

  void add(const Feature& feature);
  double float_fsum() const { return float_sum + float_sum_compensation; }
};

struct FileStats {
  uint64_t num_records = 0;
  std::set<MessageKind> kinds;
  std::map<std::string, KeyStats> features;
  std::map<std::string, KeyStats> feature_lists;

  void add(const ParsedRecord& record);
  // "Example", "SequenceExample", "other", or "-" for a file with no records; mixed kinds join with "+".
  std::string kind_name() const;
};

std::string int128_to_string(Int128 v);

}  // namespace tandem::data
