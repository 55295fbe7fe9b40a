// For gpu-labelled tests outside tests/cuda: why no GPU can be used here (the CUDA plugin did not
// load, or sees no device), so they skip with the reason shown.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "engine/backend/plugin_loader.h"

namespace tandem::testing {

inline std::string plugin_gpu_skip_reason() {
  const backend::CudaPluginStatus& status = backend::load_cuda_plugin();
  if (!status.loaded) return status.summary();
  return status.device_count > 0 ? std::string() : "the CUDA plugin sees no GPU";
}

}  // namespace tandem::testing

#define TANDEM_REQUIRE_PLUGIN_GPU()                                                                   \
  do {                                                                                                \
    if (std::string reason = ::tandem::testing::plugin_gpu_skip_reason(); !reason.empty()) GTEST_SKIP() << reason; \
  } while (false)
