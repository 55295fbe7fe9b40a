// A short, safe description of a JSON value for error messages: damaged files can hold huge or
// deeply nested values, and dumping those whole would flood the message (or recurse deeply).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace tandem::train {

inline std::string json_brief(const nlohmann::json& j) {
  constexpr size_t kMaxChars = 48;
  if (j.is_array()) {
    bool small = j.size() <= 8;
    for (const auto& e : j) small = small && e.is_primitive();
    if (!small) return "an array of " + std::to_string(j.size());
  }
  if (j.is_object()) return "an object of " + std::to_string(j.size()) + " keys";
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return text.size() <= kMaxChars ? text : text.substr(0, kMaxChars) + "...";
}

}  // namespace tandem::train
