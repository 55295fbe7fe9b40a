// The skip reason: first the driver (the usual absence), then the plugin's own status.
#include "tests/cuda/cuda_test_util.h"

#include "engine/backend/plugin_loader.h"
#include "engine/backend/shared_library.h"

namespace tandem::testing {

std::string cuda_skip_reason() {
  backend::SharedLibrary driver("libcuda.so.1");
  if (!driver.loaded()) return "no CUDA driver: " + driver.error();
  driver.release();  // the plugin's runtime will use it; a driver is never unloaded
  const backend::CudaPluginStatus& status = backend::load_cuda_plugin();
  if (!status.loaded) return status.summary();
  if (status.device_count == 0) return "no GPU visible to the CUDA plugin";
  return {};
}

}  // namespace tandem::testing
