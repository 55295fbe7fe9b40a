#include "tests/distribute/sync_batchnorm_test_util.h"

#include <cstddef>

#include "engine/core/random.h"

namespace tandem::testing {

std::vector<float> random_normal_values(int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = 2.0f * g.normal() + 0.5f;
  return v;
}

}  // namespace tandem::testing
