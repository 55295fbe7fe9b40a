// Shared by the distribute tests that need GPUs: why they cannot run here, so they skip with a
// visible reason on machines (like CI) that have the toolkit but no driver or GPU.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tandem::testing {

// Empty when the CUDA plugin is loaded and sees a GPU; else why not.
std::string gpu_skip_reason();
int gpu_count();                 // GPUs the CUDA plugin sees (0 when it cannot load)
std::vector<int> all_devices();  // 0 .. min(gpu_count(), 8) - 1

}  // namespace tandem::testing

#define REQUIRE_GPUS(n)                                                                                     \
  do {                                                                                                      \
    if (std::string reason = ::tandem::testing::gpu_skip_reason(); !reason.empty())             \
      GTEST_SKIP() << reason;                                                                               \
    if (::tandem::testing::gpu_count() < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs";       \
  } while (false)
