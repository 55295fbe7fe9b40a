// The cross-replica primitive of SyncBatchNorm: per-channel (sum, sum of squares, count) summed
// over every replica in one all-reduce, giving the global batch mean and variance per channel.
#pragma once

#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/distribute/communicator.h"

namespace tandem::distribute {

class SyncBatchStats {
 public:
  // channels: C of the BatchNorm layer; the packed buffer (2C + 1 floats) is allocated here, once.
  SyncBatchStats(Communicator& comm, int64_t channels);

  // sum, sum_sq: (C) f32 on the host, this replica's sums over its N*H*W values per channel;
  // count: this replica's N*H*W. Fills mean and var ((C) f32, biased variance, as BatchNorm's
  // normalisation uses) with the statistics of the global batch, bitwise equal on every replica.
  // Returns the global count (for the unbiased running variance: var * n / (n - 1)).
  int64_t reduce(const Tensor& sum, const Tensor& sum_sq, int64_t count, const Tensor& mean, const Tensor& var);

 private:
  Communicator* comm_;
  int64_t channels_;
  Tensor packed_;  // [sum (C), sum_sq (C), count]
};

}  // namespace tandem::distribute
