// A fast tf.Example parser for the common case: a few known keys per record. It walks the
// wire format once, decodes only the keys asked for, and keeps views into the payload, so a
// steady-state parse allocates nothing. Measured against protobuf in bench/tfrecord_bench.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/example.h"

namespace tandem::data {

struct FeatureView {
  bool present = false;  // the key was in the record
  FeatureType type = FeatureType::kNone;
  std::vector<std::string_view> bytes;  // views into the payload
  std::vector<float> floats;
  std::vector<int64_t> ints;

  size_t size() const;
  Feature to_feature() const;
};

class FastExampleParser {
 public:
  explicit FastExampleParser(std::vector<std::string> keys);

  // Parses one serialized tf.Example; throws kDataLoss on malformed bytes. The views stay
  // valid while the payload does. Semantics follow protobuf's: the last entry of a key wins,
  // a oneof set twice keeps the last kind, repeated lists of one kind concatenate.
  void parse(std::string_view payload);

  size_t num_keys() const { return keys_.size(); }
  const std::string& key(size_t i) const { return keys_[i]; }
  const FeatureView& feature(size_t i) const { return views_[i]; }

 private:
  void parse_features(std::string_view bytes);
  void parse_entry(std::string_view bytes);

  std::vector<std::string> keys_;
  std::vector<FeatureView> views_;
};

}  // namespace tandem::data
