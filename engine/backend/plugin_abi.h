// The C entry point between the engine and the dlopen'ed CUDA plugin (libtandem_cuda.so).
// Kept free of CUDA headers: the loader includes it on machines with no CUDA at all. Raise
// kTandemCudaPluginAbi whenever TandemCudaPlugin, DeviceServices or KernelTable change layout.
#pragma once

#include <cstddef>

#include "engine/backend/kernels.h"
#include "engine/core/device.h"

extern "C" {

inline constexpr int kTandemCudaPluginAbi = 1;
inline constexpr const char* kTandemCudaPluginEntry = "tandem_cuda_plugin_init";

struct TandemCudaPlugin {
  int abi_version = 0;
  // Owned by the plugin, alive until the process ends (the plugin is never unloaded).
  tandem::DeviceServices* services = nullptr;
  const tandem::backend::KernelTable* kernels = nullptr;
  int device_count = 0;
  char runtime_description[128] = {};  // "CUDA runtime 13.0, 2 device(s)"
  char error[512] = {};                // why init failed; no exception crosses this boundary
};

// Returns 0 and fills *out on success; returns nonzero with out->error set on failure
// (an ABI mismatch, no driver, no device).
using TandemCudaPluginInit = int (*)(int abi_version, TandemCudaPlugin* out);

}  // extern "C"
