// The plugin's exported symbols. tandem_cuda_plugin_init checks the ABI version, creates the device
// services and hands back the kernel table; tandem_cuda_kernel_table hands back the table alone,
// without touching the driver (for the test that no entry is missing). This C boundary is the one
// place in library code that catches: no exception may cross dlsym.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <memory>

#include "engine/backend/cuda/cuda_device.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/plugin_abi.h"

namespace {

void write_error(TandemCudaPlugin* out, const char* text) {
  std::snprintf(out->error, sizeof(out->error), "%s", text);
}

int init(int abi_version, TandemCudaPlugin* out) {
  if (abi_version != kTandemCudaPluginAbi) {
    auto text = fmt::format("ABI mismatch: the engine speaks version {}, this libtandem_cuda.so version {}; "
                            "rebuild both from the same tree",
                            abi_version, kTandemCudaPluginAbi);
    write_error(out, text.c_str());
    return 1;
  }
  // Created once and never destroyed: the plugin stays loaded until the process ends, and
  // allocators that outlive main still return memory through these services.
  static tandem::cuda::CudaDeviceServices* services = new tandem::cuda::CudaDeviceServices();
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  out->abi_version = kTandemCudaPluginAbi;
  out->services = services;
  out->kernels = &tandem::backend::cuda::kernel_table();
  out->device_count = services->device_count();
  std::snprintf(out->runtime_description, sizeof(out->runtime_description), "CUDA runtime %d.%d, %d device(s)",
                runtime / 1000, runtime % 1000 / 10, services->device_count());
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int tandem_cuda_plugin_init(int abi_version,
                                                                               TandemCudaPlugin* out) {
  if (out == nullptr) return 2;
  try {
    return init(abi_version, out);
  } catch (const std::exception& e) {
    write_error(out, e.what());
  } catch (...) {
    write_error(out, "unknown exception during CUDA plugin initialisation");
  }
  return 1;
}

extern "C" __attribute__((visibility("default"))) const tandem::backend::KernelTable* tandem_cuda_kernel_table() {
  return &tandem::backend::cuda::kernel_table();
}

// tandem::cuda::host_synchronizations, for the test that a steady training step never waits.
extern "C" __attribute__((visibility("default"))) uint64_t tandem_cuda_host_synchronizations() {
  return tandem::cuda::host_synchronizations();
}
