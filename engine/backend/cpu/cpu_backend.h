// The CPU backend: oneDNN primitives for convolution, batch norm, pooling and matmul,
// plain loops for the rest. Primitives are created once per shape and cached.
#pragma once

#include "engine/backend/kernels.h"

namespace tandem::backend::cpu {

const KernelTable& kernel_table();

}  // namespace tandem::backend::cpu
