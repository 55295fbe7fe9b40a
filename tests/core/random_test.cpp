// Philox generator: repeatable, independent per replica, restorable mid-stream, sane moments.
#include "engine/core/random.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/core/thread_pool.h"

namespace tandem {
namespace {

TEST(Generator, SameSeedSameStreamAndReplicasDiffer) {
  Generator a = Generator::for_replica(42, 3, 0), b = Generator::for_replica(42, 3, 0);
  Generator c = Generator::for_replica(42, 3, 1), d = Generator::for_replica(42, 4, 0);
  int same_c = 0, same_d = 0;
  for (int i = 0; i < 1000; ++i) {
    uint32_t x = a.next_u32();
    EXPECT_EQ(x, b.next_u32());
    same_c += x == c.next_u32();
    same_d += x == d.next_u32();
  }
  EXPECT_LT(same_c, 3);
  EXPECT_LT(same_d, 3);
}

TEST(Generator, StateRestoresMidBlock) {
  Generator a(7);
  for (int i = 0; i < 5; ++i) a.next_u32();
  Generator::State s = a.state();
  Generator b(0);
  b.set_state(s);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.next_u32(), b.next_u32()) << i;
}

TEST(Generator, UniformAndNormalMoments) {
  Generator g(1);
  double sum_u = 0, sum_n = 0, sum_n2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    float u = g.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum_u += u;
    double z = g.normal();
    sum_n += z;
    sum_n2 += z * z;
  }
  EXPECT_NEAR(sum_u / n, 0.5, 0.005);
  EXPECT_NEAR(sum_n / n, 0.0, 0.01);
  EXPECT_NEAR(sum_n2 / n, 1.0, 0.02);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(g.below(7), 7u);
}

TEST(ThreadPool, ParallelForCoversEveryIndexAndRethrows) {
  ThreadPool pool(3);
  std::vector<int> hits(1000, 0);
  pool.parallel_for(0, 1000, [&](int64_t i) { hits[static_cast<size_t>(i)] += 1; });
  for (int h : hits) EXPECT_EQ(h, 1);
  EXPECT_THROW(pool.parallel_for(0, 10, [](int64_t i) {
    if (i == 5) throw std::runtime_error("boom");
  }), std::runtime_error);
  EXPECT_EQ(pool.submit([] { return 6 * 7; }).get(), 42);
}

}  // namespace
}  // namespace tandem
