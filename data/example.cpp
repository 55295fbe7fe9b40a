// Example/SequenceExample through protobuf. The generated classes do the wire work (packed
// and unpacked repeated values, merging of repeated fields); this file maps them to values.
#include "data/example.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "engine/core/error.h"
#include "third_party/tensorflow/example.pb.h"

namespace tandem::data {

std::string_view feature_type_name(FeatureType type) {
  switch (type) {
    case FeatureType::kNone: return "none";
    case FeatureType::kBytes: return "bytes";
    case FeatureType::kFloat: return "float";
    case FeatureType::kInt64: return "int64";
  }
  return "none";
}

std::string_view message_kind_name(MessageKind kind) {
  switch (kind) {
    case MessageKind::kExample: return "Example";
    case MessageKind::kSequenceExample: return "SequenceExample";
    case MessageKind::kOther: return "other";
  }
  return "other";
}

size_t Feature::size() const {
  switch (type) {
    case FeatureType::kBytes: return bytes.size();
    case FeatureType::kFloat: return floats.size();
    case FeatureType::kInt64: return ints.size();
    case FeatureType::kNone: return 0;
  }
  return 0;
}

Feature Feature::of_bytes(std::vector<std::string> v) {
  Feature f;
  f.type = FeatureType::kBytes;
  f.bytes = std::move(v);
  return f;
}

Feature Feature::of_floats(std::vector<float> v) {
  Feature f;
  f.type = FeatureType::kFloat;
  f.floats = std::move(v);
  return f;
}

Feature Feature::of_ints(std::vector<int64_t> v) {
  Feature f;
  f.type = FeatureType::kInt64;
  f.ints = std::move(v);
  return f;
}

namespace {

Feature from_proto(const tensorflow::Feature& p) {
  Feature f;
  switch (p.kind_case()) {
    case tensorflow::Feature::kBytesList:
      f.type = FeatureType::kBytes;
      f.bytes.assign(p.bytes_list().value().begin(), p.bytes_list().value().end());
      break;
    case tensorflow::Feature::kFloatList:
      f.type = FeatureType::kFloat;
      f.floats.assign(p.float_list().value().begin(), p.float_list().value().end());
      break;
    case tensorflow::Feature::kInt64List:
      f.type = FeatureType::kInt64;
      f.ints.assign(p.int64_list().value().begin(), p.int64_list().value().end());
      break;
    case tensorflow::Feature::KIND_NOT_SET: break;
  }
  return f;
}

void to_proto(const Feature& f, tensorflow::Feature* p) {
  switch (f.type) {
    case FeatureType::kBytes:
      p->mutable_bytes_list()->mutable_value()->Assign(f.bytes.begin(), f.bytes.end());
      break;
    case FeatureType::kFloat:
      p->mutable_float_list()->mutable_value()->Assign(f.floats.begin(), f.floats.end());
      break;
    case FeatureType::kInt64:
      p->mutable_int64_list()->mutable_value()->Assign(f.ints.begin(), f.ints.end());
      break;
    case FeatureType::kNone: break;
  }
}

FeatureMap from_proto(const tensorflow::Features& p) {
  FeatureMap out;
  for (const auto& [key, value] : p.feature()) out.emplace(key, from_proto(value));
  return out;
}

// Parses with protobuf; protobuf reports why it failed only through its log, so the
// message says what we know: the size and the first bytes.
template <typename Message>
bool parse_proto(std::string_view payload, Message* message) {
  if (payload.size() > static_cast<size_t>(INT32_MAX)) return false;
  return message->ParseFromArray(payload.data(), static_cast<int>(payload.size()));
}

[[noreturn]] void not_an_example(std::string_view payload, std::string_view why) {
  std::string head;
  for (size_t i = 0; i < payload.size() && i < 8; ++i) head += fmt::format("{:02x}", static_cast<uint8_t>(payload[i]));
  throw_error(ErrorCode::kDataLoss, "not a tf.Example or SequenceExample: {} ({} bytes, starting {})", why,
              payload.size(), head.empty() ? "<empty>" : head);
}

// Map entries in key order, so the same Example always gives the same bytes.
std::string serialize_deterministic(const google::protobuf::MessageLite& message) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace

FeatureMap parse_example(std::string_view payload) {
  tensorflow::Example example;
  if (!parse_proto(payload, &example)) not_an_example(payload, "the bytes do not parse as tf.Example");
  return from_proto(example.features());
}

ParsedRecord parse_record(std::string_view payload) {
  ParsedRecord out;
  tensorflow::SequenceExample sequence;
  if (parse_proto(payload, &sequence) && sequence.GetReflection()->GetUnknownFields(sequence).empty()) {
    out.features = from_proto(sequence.context());
    if (sequence.has_feature_lists()) {
      out.kind = MessageKind::kSequenceExample;
      for (const auto& [key, list] : sequence.feature_lists().feature_list()) {
        std::vector<Feature>& steps = out.feature_lists[key];
        for (const tensorflow::Feature& step : list.feature()) steps.push_back(from_proto(step));
      }
    } else {
      out.kind = MessageKind::kExample;
    }
    return out;
  }
  // Field 2 with a wire type SequenceExample rejects can still be a valid Example's unknown field;
  // we call such a message "other": neither TensorFlow message carries it.
  not_an_example(payload, "the bytes do not parse as either message, or carry fields neither has");
}

std::string serialize_example(const FeatureMap& features) {
  tensorflow::Example example;
  auto* map = example.mutable_features()->mutable_feature();
  for (const auto& [key, value] : features) to_proto(value, &(*map)[key]);
  return serialize_deterministic(example);
}

std::string serialize_record(const ParsedRecord& record) {
  if (record.kind != MessageKind::kSequenceExample) return serialize_example(record.features);
  tensorflow::SequenceExample sequence;
  auto* context = sequence.mutable_context()->mutable_feature();
  for (const auto& [key, value] : record.features) to_proto(value, &(*context)[key]);
  auto* lists = sequence.mutable_feature_lists()->mutable_feature_list();
  for (const auto& [key, steps] : record.feature_lists) {
    tensorflow::FeatureList& list = (*lists)[key];
    for (const Feature& step : steps) to_proto(step, list.add_feature());
  }
  return serialize_deterministic(sequence);
}

}  // namespace tandem::data
