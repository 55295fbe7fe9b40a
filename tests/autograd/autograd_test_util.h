// Shared by the autograd tests: inputs drawn from a seeded generator.
#pragma once

#include <cstdint>

#include "engine/core/tensor.h"

namespace tandem::testing {

// A CPU f32 tensor of uniform draws in [lo, hi) from Generator(seed), in element order.
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

}  // namespace tandem::testing
