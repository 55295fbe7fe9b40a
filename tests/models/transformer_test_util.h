// Helpers shared by the transformer tests against PyTorch and against the CPU backend.
#pragma once

#include <cstdint>

#include "engine/core/tensor.h"

namespace tandem::testing {

// The worst element's error against the largest |want| (both read on the CPU); infinite when the
// sizes differ (also a test failure) or an error is NaN.
double scaled_error(const Tensor& got, const Tensor& want);

// Token ids drawn uniformly from [0, vocab), seeded.
Tensor random_ids(const Shape& shape, int64_t vocab, uint64_t seed);

}  // namespace tandem::testing
