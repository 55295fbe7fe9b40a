// The CPU's column sums (a bias's gradient, layer norm's dbeta): against a double reference over
// several chunks of rows and a ragged last one, for f32 and bf16 input, and the same bits whatever
// the thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/backend/cpu/cpu_column_sums.h"
#include "tests/backend/backend_test_util.h"

namespace tandem::backend::testing {
namespace {

TEST(ColumnSums, MatchTheDoubleReferenceForAnyThreadCount) {
  const int64_t rows = 1000, cols = 37;  // chunks of 256 rows: three full, one ragged
  const Vec v = random_vec(static_cast<size_t>(rows * cols), 3, -2.0, 2.0);
  std::vector<float> g(v.begin(), v.end());
  std::vector<uint16_t> g16(g.size());
  for (size_t i = 0; i < g.size(); ++i) g16[i] = float_to_bf16(g[i]).bits;
  std::vector<double> want(cols, 0.0), want16(cols, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      want[static_cast<size_t>(j)] += g[static_cast<size_t>(i * cols + j)];
      want16[static_cast<size_t>(j)] += bf16_to_float(BFloat16{g16[static_cast<size_t>(i * cols + j)]});
    }
  }
  std::vector<float> first;
  for (int threads : {1, 2}) {
    ExecutionContext ctx(Device::cpu(), threads, 1);
    std::vector<float> out(cols), out16(cols);
    cpu::column_sums(ctx, g.data(), rows, cols, out.data());
    cpu::column_sums(ctx, g16.data(), rows, cols, out16.data());
    for (int64_t j = 0; j < cols; ++j) {
      EXPECT_NEAR(out[static_cast<size_t>(j)], want[static_cast<size_t>(j)], 1e-4) << "column " << j;
      EXPECT_NEAR(out16[static_cast<size_t>(j)], want16[static_cast<size_t>(j)], 1e-4) << "bf16 column " << j;
    }
    if (first.empty()) first = out;
    EXPECT_EQ(0, std::memcmp(first.data(), out.data(), out.size() * sizeof(float))) << threads << " threads";
  }
}

}  // namespace
}  // namespace tandem::backend::testing
