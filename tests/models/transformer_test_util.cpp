#include "tests/models/transformer_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/random.h"

namespace tandem::testing {

double scaled_error(const Tensor& got, const Tensor& want) {
  std::vector<float> g = got.to(Device::cpu()).to_vector(), w = want.to(Device::cpu()).to_vector();
  EXPECT_EQ(g.size(), w.size());
  double worst = g.size() == w.size() ? 0.0 : INFINITY, scale = 1e-30;
  for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
    const double e = std::fabs(static_cast<double>(g[i]) - w[i]);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
    scale = std::max(scale, std::fabs(static_cast<double>(w[i])));
  }
  return worst / scale;
}

Tensor random_ids(const Shape& shape, int64_t vocab, uint64_t seed) {
  Generator g(seed);
  Tensor t = Tensor::empty(shape, DType::kI64);
  int64_t* ids = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) ids[i] = static_cast<int64_t>(g.below(static_cast<uint64_t>(vocab)));
  return t;
}

}  // namespace tandem::testing
