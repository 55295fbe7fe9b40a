// The TFRecord framing reader on arbitrary files: every compression, every corruption policy,
// tiny and large buffers. Records or tandem::Error, nothing else (libFuzzer reports any other
// exception, crash, leak or sanitizer finding).
#include <spdlog/spdlog.h>

#include "data/example.h"
#include "data/tfrecord_reader.h"
#include "engine/core/error.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::data;
  if (size < 1) return 0;
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  const uint8_t mode = data[0];  // which reader settings: the rest of the input is the file
  TFRecordReaderOptions options;
  options.compression = static_cast<Compression>(mode % 4);  // none, gzip, zlib, auto
  options.on_corrupt = static_cast<OnCorrupt>((mode / 4) % 3);
  options.buffer_size = (mode & 0x80) ? 1 + (mode % 61) : 256 * 1024;
  const std::string path = tandem::fuzz::scratch_file(data + 1, size - 1, ".tfrecord");
  options.quarantine_path = path + ".quarantine";
  try {
    TFRecordReader reader(path, options);
    std::string_view record;
    for (int n = 0; n < 100000 && reader.next(&record); ++n) {
      try {
        parse_record(record);
      } catch (const tandem::Error&) {
      }
    }
  } catch (const tandem::Error&) {
  }
  return 0;
}
