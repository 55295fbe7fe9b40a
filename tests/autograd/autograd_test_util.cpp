#include "tests/autograd/autograd_test_util.h"

#include "engine/core/random.h"

namespace tandem::testing {

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  Generator g(seed);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = g.uniform(lo, hi);
  return t;
}

}  // namespace tandem::testing
