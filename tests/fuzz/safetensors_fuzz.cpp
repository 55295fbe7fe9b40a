// The safetensors reader (checkpoints' model and optimizer files) on arbitrary files: header
// validation, then the data with its checksums. Tensors or tandem::Error, never a crash or a
// huge allocation.
#include "engine/core/error.h"
#include "engine/train/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tandem::fuzz::scratch_file(data, size, ".safetensors");
  try {
    tandem::train::read_safetensors_header(path);
    tandem::train::read_safetensors(path);
  } catch (const tandem::Error&) {
  }
  return 0;
}
