// Shared by the SyncBatchNorm tests on CPU replicas and on GPUs.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::testing {

// What one replica's batch norm produced, on the host in NCHW order.
struct BatchNormResult {
  std::vector<float> y, dx, running_mean, running_var, dgamma, dbeta;
};

// n values of 2 N(0, 1) + 0.5 from seed.
std::vector<float> random_normal_values(int64_t n, uint64_t seed);

}  // namespace tandem::testing
