// float32 and bytes values for the JSON reports. Floats go through their own shortest text:
// nlohmann prints the shortest text of a double, and a float widened to double has a long one.
#include "data/json_values.h"

#include <charconv>
#include <cmath>
#include <cstdint>

namespace tandem::data {

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  if (i < bytes.size()) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

double float32_as_double(float v) {
  char text[32];  // a float's shortest text has at most 15 characters ("-1.1754944e-38")
  std::to_chars_result written = std::to_chars(text, text + sizeof(text), v);
  double out = 0;
  // from_chars, not strtod: it ignores the locale, whose decimal point may be ','.
  std::from_chars(text, written.ptr, out);
  return out;
}

nlohmann::ordered_json float32_json(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return float32_as_double(v);
}

}  // namespace tandem::data
