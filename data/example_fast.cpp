// The wire walk of FastExampleParser. Every length is checked against the bytes left before
// it is used, so any byte string gives a result or a kDataLoss error, never a wild read.
#include "data/example_fast.h"

#include <cstring>

#include "engine/core/error.h"

namespace tandem::data {

namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}
  bool done() const { return p_ == end_; }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p_ == end_) bad("varint runs off the end");
      uint8_t b = static_cast<uint8_t>(*p_++);
      if (shift == 63 && b > 1) bad("varint longer than 64 bits");
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    bad("varint longer than 10 bytes");
  }

  std::string_view take(uint64_t n) {
    if (n > static_cast<uint64_t>(end_ - p_)) bad("length-delimited field runs off the end");
    std::string_view out(p_, n);
    p_ += n;
    return out;
  }

  std::string_view len_field() { return take(varint()); }

  void skip(uint32_t wire) {
    switch (wire) {
      case kVarint: varint(); return;
      case kFixed64: take(8); return;
      case kLen: len_field(); return;
      case kFixed32: take(4); return;
      default: bad("unsupported wire type");
    }
  }

  // Reads a tag; field 0 is invalid in protobuf.
  void tag(uint32_t* field, uint32_t* wire) {
    uint64_t t = varint();
    *field = static_cast<uint32_t>(t >> 3);
    *wire = static_cast<uint32_t>(t & 7);
    if (t >> 3 == 0 || t >> 3 > 0x1fffffff) bad("invalid field number");
  }

  [[noreturn]] static void bad(const char* why) {
    throw_error(ErrorCode::kDataLoss, "not a tf.Example: {} (fast parser)", why);
  }

 private:
  const char* p_;
  const char* end_;
};

void decode_list(std::string_view bytes, FeatureType type, FeatureView* view) {
  WireReader r(bytes);
  while (!r.done()) {
    uint32_t field, wire;
    r.tag(&field, &wire);
    if (field != 1) {
      r.skip(wire);
      continue;
    }
    if (type == FeatureType::kBytes && wire == kLen) {
      view->bytes.push_back(r.len_field());
    } else if (type == FeatureType::kFloat && wire == kLen) {
      std::string_view packed = r.len_field();
      if (packed.size() % 4 != 0) WireReader::bad("packed floats not a multiple of 4 bytes");
      if (packed.empty()) continue;  // an empty vector's data() may be null, which memcpy must not see
      size_t old = view->floats.size();
      view->floats.resize(old + packed.size() / 4);
      std::memcpy(view->floats.data() + old, packed.data(), packed.size());
    } else if (type == FeatureType::kFloat && wire == kFixed32) {
      float f;
      std::memcpy(&f, r.take(4).data(), 4);
      view->floats.push_back(f);
    } else if (type == FeatureType::kInt64 && wire == kLen) {
      WireReader packed(r.len_field());
      while (!packed.done()) view->ints.push_back(static_cast<int64_t>(packed.varint()));
    } else if (type == FeatureType::kInt64 && wire == kVarint) {
      view->ints.push_back(static_cast<int64_t>(r.varint()));
    } else {
      WireReader::bad("list value with the wrong wire type");
    }
  }
}

void decode_feature(std::string_view bytes, FeatureView* view) {
  WireReader r(bytes);
  while (!r.done()) {
    uint32_t field, wire;
    r.tag(&field, &wire);
    if (field < 1 || field > 3) {
      r.skip(wire);
      continue;
    }
    if (wire != kLen) WireReader::bad("Feature kind with the wrong wire type");
    FeatureType type = field == 1 ? FeatureType::kBytes : field == 2 ? FeatureType::kFloat : FeatureType::kInt64;
    if (type != view->type) {  // a oneof switching kind drops the old values
      view->bytes.clear();
      view->floats.clear();
      view->ints.clear();
      view->type = type;
    }
    decode_list(r.len_field(), type, view);
  }
}

}  // namespace

size_t FeatureView::size() const {
  switch (type) {
    case FeatureType::kBytes: return bytes.size();
    case FeatureType::kFloat: return floats.size();
    case FeatureType::kInt64: return ints.size();
    case FeatureType::kNone: return 0;
  }
  return 0;
}

Feature FeatureView::to_feature() const {
  Feature f;
  f.type = type;
  for (std::string_view b : bytes) f.bytes.emplace_back(b);
  f.floats = floats;
  f.ints = ints;
  return f;
}

FastExampleParser::FastExampleParser(std::vector<std::string> keys) : keys_(std::move(keys)), views_(keys_.size()) {}

void FastExampleParser::parse(std::string_view payload) {
  for (FeatureView& v : views_) {
    v.present = false;
    v.type = FeatureType::kNone;
    v.bytes.clear();
    v.floats.clear();
    v.ints.clear();
  }
  WireReader r(payload);
  while (!r.done()) {
    uint32_t field, wire;
    r.tag(&field, &wire);
    if (field == 1 && wire == kLen) {
      parse_features(r.len_field());  // a repeated message field merges: parse each occurrence
    } else {
      if (field == 1) WireReader::bad("Example.features with the wrong wire type");
      r.skip(wire);
    }
  }
}

void FastExampleParser::parse_features(std::string_view bytes) {
  WireReader r(bytes);
  while (!r.done()) {
    uint32_t field, wire;
    r.tag(&field, &wire);
    if (field == 1 && wire == kLen) {
      parse_entry(r.len_field());
    } else {
      if (field == 1) WireReader::bad("Features.feature with the wrong wire type");
      r.skip(wire);
    }
  }
}

void FastExampleParser::parse_entry(std::string_view bytes) {
  WireReader r(bytes);
  std::string_view key, value;
  bool has_value = false;
  while (!r.done()) {
    uint32_t field, wire;
    r.tag(&field, &wire);
    if ((field == 1 || field == 2) && wire != kLen) WireReader::bad("map entry field with the wrong wire type");
    if (field == 1) {
      key = r.len_field();
    } else if (field == 2) {
      value = r.len_field();
      has_value = true;
    } else {
      r.skip(wire);
    }
  }
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] != key) continue;
    FeatureView& v = views_[i];
    v.present = true;  // a later entry with the same key replaces this one, as in a protobuf map
    v.type = FeatureType::kNone;
    v.bytes.clear();
    v.floats.clear();
    v.ints.clear();
    if (has_value) decode_feature(value, &v);
    return;
  }
}

}  // namespace tandem::data
