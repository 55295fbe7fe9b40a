// tf.train.Example and SequenceExample as plain C++ values, parsed and built through the
// protobuf classes generated from third_party/tensorflow/*.proto.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data {

enum class FeatureType { kNone, kBytes, kFloat, kInt64 };  // kNone: a Feature with no kind set
std::string_view feature_type_name(FeatureType type);       // "none", "bytes", "float", "int64"

struct Feature {
  FeatureType type = FeatureType::kNone;
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> ints;

  size_t size() const;  // number of values, 0 for kNone
  static Feature of_bytes(std::vector<std::string> v);
  static Feature of_floats(std::vector<float> v);
  static Feature of_ints(std::vector<int64_t> v);
  bool operator==(const Feature& other) const = default;
};

enum class MessageKind { kExample, kSequenceExample, kOther };
std::string_view message_kind_name(MessageKind kind);  // "Example", "SequenceExample", "other"

using FeatureMap = std::map<std::string, Feature>;

struct ParsedRecord {
  MessageKind kind = MessageKind::kExample;
  FeatureMap features;  // Example features, or SequenceExample context
  std::map<std::string, std::vector<Feature>> feature_lists;
};

// Parses a record's payload. A message with feature_lists (field 2) is a SequenceExample,
// otherwise an Example; payloads that parse as neither, or carry fields neither has, throw
// kDataLoss ("not a tf.Example or SequenceExample: ...").
ParsedRecord parse_record(std::string_view payload);

// Parses as tf.Example only; throws kDataLoss when the bytes are not one.
FeatureMap parse_example(std::string_view payload);

// Serializes an Example (deterministic: keys in order) or a SequenceExample.
std::string serialize_example(const FeatureMap& features);
std::string serialize_record(const ParsedRecord& record);

}  // namespace tandem::data
