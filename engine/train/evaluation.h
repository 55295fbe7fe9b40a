// Accuracy helpers of the training loop.
#pragma once

#include <cstdint>

#include "engine/core/tensor.h"

namespace tandem::train {

// (N, K) logits, (N) i64 labels: how many rows have their label among the k largest logits.
int64_t count_top_k(const Tensor& logits, const Tensor& labels, int k);

}  // namespace tandem::train
