// A small streaming JSON writer for inspect's and convert's reports: it handles commas,
// string escaping, base64 for bytes and JSON's missing NaN/Infinity (written as strings).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data {

std::string base64_encode(std::string_view bytes);

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);
  JsonWriter& string(std::string_view s);
  JsonWriter& number(uint64_t v);
  JsonWriter& float_value(double v);  // NaN and infinities as "NaN", "Infinity", "-Infinity"
  JsonWriter& null();
  JsonWriter& boolean(bool b);
  const std::string& str() const { return out_; }

 private:
  void separate();
  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

}  // namespace tandem::data
