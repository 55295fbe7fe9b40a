// The per-element values of the factories (factories.h), shared by the CPU kernels
// (cpu/cpu_factories.cpp) and the CUDA ones (cuda/cuda_factories.cu). nvcc compiles this header, so it
// includes no engine header but these.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/backend/host_device.h"
#include "engine/backend/philox.h"

namespace tandem::backend {

// arange's element i in double (torch.arange's accumulate type for floats), rounded once by the caller.
// One fused multiply-add on every backend (nvcc would contract a product and a sum into one, a host
// compiler may not, and the two can differ in the last bit); a step of 0 (full) gives start itself,
// -0.0 included.
TANDEM_HOST_DEVICE inline double arange_element(double start, double step, int64_t i) {
  return step == 0.0 ? start : fma(static_cast<double>(i), step, start);
}

// Element i of rand / randn from the stream of `seed`: uniform a + (b - a) u_i, or normal
// a + b z with z from Box-Muller over draws 2i and 2i + 1, in double (1 - u lies in (0, 1]: log is finite).
TANDEM_HOST_DEVICE inline float random_element(uint64_t seed, bool normal, float a, float b, int64_t i) {
  const auto index = static_cast<uint64_t>(i);
  if (!normal) return static_cast<float>(a + (static_cast<double>(b) - a) * philox::uniform(seed, index));
  const double u1 = philox::uniform(seed, 2 * index), u2 = philox::uniform(seed, 2 * index + 1);
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double z = sqrt(-2.0 * log(1.0 - u1)) * cos(kTwoPi * u2);
  return static_cast<float>(a + static_cast<double>(b) * z);
}

}  // namespace tandem::backend
