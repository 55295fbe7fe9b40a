// A checkpoint's meta.json on arbitrary text: any JSON document that is not a valid meta.json is
// a tandem::Error naming the field, never another exception or a crash.
#include <nlohmann/json.hpp>

#include <string_view>

#include "engine/core/error.h"
#include "engine/train/checkpoint/meta.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // not JSON: the loader's parse step reports that (engine/train/checkpoint/load.cpp)
  try {
    tandem::train::meta_from_json(j, "meta.json");
  } catch (const tandem::Error&) {
  }
  return 0;
}
