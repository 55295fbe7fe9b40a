// The values of Tandem's JSON reports that JSON has no native form for: float32 numbers
// (the shortest text that reads back as the same float), NaN and infinities, and bytes (base64).
// The documents themselves are nlohmann::ordered_json; docs/TFRECORD.md states the conventions.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace tandem::data {

/// Standard base64 (RFC 4648, with '=' padding) of `bytes`.
std::string base64_encode(std::string_view bytes);

/// The double whose shortest text is the float's shortest text, so that nlohmann prints 0.1f
/// as 0.1, not 0.10000000149011612. A negative zero stays negative (printed -0.0).
double float32_as_double(float v);

/// A float32 as a JSON value: a number as above, or "NaN", "Infinity", "-Infinity" (JSON has none).
nlohmann::ordered_json float32_json(float v);

}  // namespace tandem::data
