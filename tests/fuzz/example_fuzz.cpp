// Both tf.Example parsers (protobuf's and our fast one) on arbitrary payloads: parsed features
// or tandem::Error (DataLoss), nothing else.
#include <google/protobuf/stubs/logging.h>

#include <string_view>

#include "data/example.h"
#include "data/example_fast.h"
#include "engine/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::data;
  static google::protobuf::LogSilencer quiet;  // protobuf logs each bad UTF-8 key
  const std::string_view payload(reinterpret_cast<const char*>(data), size);
  try {
    parse_record(payload);
  } catch (const tandem::Error&) {
  }
  try {
    static FastExampleParser fast({"image/encoded", "label", "x", "k"});
    fast.parse(payload);
    for (size_t i = 0; i < fast.num_keys(); ++i) (void)fast.feature(i).to_feature();
  } catch (const tandem::Error&) {
  }
  return 0;
}
