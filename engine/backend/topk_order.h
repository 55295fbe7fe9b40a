// The order topk selects in, shared by the CPU and CUDA kernels so that both pick the same
// elements in the same order: a strict total order over (value, index). Largest first: NaN before
// every number (as PyTorch's topk, which counts NaN as the largest), then descending values.
// Smallest first: ascending values, NaN after every number. Equal values: the lower index first.
#pragma once

#include <cstdint>

#include "engine/backend/host_device.h"

namespace tandem::backend {

TANDEM_HOST_DEVICE inline bool topk_before(float a, int64_t ia, float b, int64_t ib, bool largest) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan || b_nan) {
    if (a_nan && b_nan) return ia < ib;
    return largest ? a_nan : b_nan;
  }
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

}  // namespace tandem::backend
