// Philox-4x32-10 exactly as engine/core/random.cpp computes it, for kernels on either side of the
// host-device line: draw i of Generator(seed, 0) is word i % 4 of block i / 4. A kernel that draws
// by element index gives the same numbers on the CPU and on a GPU, whatever its launch geometry.
#pragma once

#include <cstdint>

#include "engine/backend/host_device.h"

namespace tandem::backend::philox {

TANDEM_HOST_DEVICE inline uint32_t draw(uint64_t seed, uint64_t i) {
  const uint64_t block = i / 4;
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1, n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  switch (i % 4) {
    case 0: return c0;
    case 1: return c1;
    case 2: return c2;
    default: return c3;
  }
}

// In [0, 1), as Generator::uniform.
TANDEM_HOST_DEVICE inline float uniform(uint64_t seed, uint64_t i) {
  return static_cast<float>(draw(seed, i) >> 8) * (1.0f / 16777216.0f);
}

}  // namespace tandem::backend::philox
