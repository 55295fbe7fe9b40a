// Shared by the CUDA tests: why CUDA cannot be used here, so GPU tests skip with a visible reason
// instead of failing on machines (like CI) that have the toolkit but no driver or GPU.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace tandem::testing {

// Empty when the CUDA plugin is loaded and sees a GPU; else the reason, e.g.
// "no CUDA driver: libcuda.so.1: cannot open shared object file: No such file or directory".
std::string cuda_skip_reason();

}  // namespace tandem::testing

#define TANDEM_REQUIRE_GPU()                                                     \
  do {                                                                           \
    if (std::string reason = ::tandem::testing::cuda_skip_reason(); !reason.empty()) \
      GTEST_SKIP() << reason;                                                    \
  } while (false)
