// Shared by the CUDA tests: why CUDA cannot be used here, so GPU tests skip with a visible reason
// instead of failing on machines (like CI) that have the toolkit but no driver or GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace tandem::testing {

// Empty when the CUDA plugin is loaded and sees a GPU; else the reason, e.g.
// "no CUDA driver: libcuda.so.1: cannot open shared object file: No such file or directory".
std::string cuda_skip_reason();

// A CPU tensor of uniform values in [lo, hi), laid out in `format`.
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f,
                     MemoryFormat format = MemoryFormat::kContiguous);
// t's values in logical (NCHW) order on the host, widened from bf16 where t is bf16.
std::vector<float> host_values(const Tensor& t);
// max |got - want| / max |want| over logical order, either side on any device.
double rel_error(const Tensor& got, const Tensor& want);
bool bitwise_equal(const Tensor& a, const Tensor& b);
inline Tensor gpu(const Tensor& t) { return t.to(Device::cuda(0)); }

}  // namespace tandem::testing

#define TANDEM_REQUIRE_GPU()                                                     \
  do {                                                                           \
    if (std::string reason = ::tandem::testing::cuda_skip_reason(); !reason.empty()) \
      GTEST_SKIP() << reason;                                                    \
  } while (false)
