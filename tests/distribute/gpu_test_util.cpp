#include "tests/distribute/gpu_test_util.h"

#include <algorithm>

#include "engine/backend/plugin_loader.h"
#include "engine/backend/shared_library.h"

namespace tandem::testing {

std::string gpu_skip_reason() {
  backend::SharedLibrary driver("libcuda.so.1");
  if (!driver.loaded()) return "no CUDA driver: " + driver.error();
  driver.release();
  const backend::CudaPluginStatus& status = backend::load_cuda_plugin();
  if (!status.loaded) return status.summary();
  if (status.device_count == 0) return "no GPU visible to the CUDA plugin";
  return {};
}

int gpu_count() {
  const backend::CudaPluginStatus& status = backend::load_cuda_plugin();
  return status.loaded ? status.device_count : 0;
}

std::vector<int> all_devices() {
  std::vector<int> devices;
  for (int d = 0; d < std::min(gpu_count(), 8); ++d) devices.push_back(d);
  return devices;
}

}  // namespace tandem::testing
