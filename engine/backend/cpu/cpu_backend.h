// The CPU backend: oneDNN primitives for convolution, batch norm, pooling and matmul,
// plain loops for the rest. Primitives are created once per shape and cached.
#pragma once

#include <cstdint>

#include "engine/backend/kernels.h"

namespace tandem::backend::cpu {

const KernelTable& kernel_table();

// oneDNN plans (primitive descriptors with their primitives) made since the process started;
// a steady-state step makes none, which tests and benchmarks check with this count.
int64_t primitives_created();

}  // namespace tandem::backend::cpu
