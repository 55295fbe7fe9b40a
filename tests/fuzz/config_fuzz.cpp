// The YAML run-config loader (what `trainer --config` reads) on arbitrary documents: a config or a
// tandem::Error that names the key, nothing else.
#include <spdlog/spdlog.h>

#include "engine/core/error.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/trainer/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  const std::string path = tandem::fuzz::scratch_file(data, size, ".yaml");
  try {
    tandem::tools::load_run_config(path, {});
  } catch (const tandem::Error&) {
  }
  return 0;
}
