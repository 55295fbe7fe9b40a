// Matmul (all four transpose combinations) and the linear layer against the double
// reference; linear gradients against finite differences.
#include <gtest/gtest.h>

#include "backend_test_util.h"

namespace tandem::backend::testing {
namespace {

class MatmulTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(MatmulTest, MatchesReferenceForEveryTranspose) {
  auto [ta, tb] = GetParam();
  ExecutionContext ctx(Device::cpu(), 2, 1);
  int64_t m = 7, k = 13, n = 5;
  Vec a = random_vec(static_cast<size_t>(m * k), 1), b = random_vec(static_cast<size_t>(k * n), 2);
  // Stored transposed when asked: a as (K, M), b as (N, K).
  Tensor sa = ta ? to_tensor(transpose(a, m, k), {k, m}) : to_tensor(a, {m, k});
  Tensor sb = tb ? to_tensor(transpose(b, k, n), {n, k}) : to_tensor(b, {k, n});
  Tensor c = matmul(ctx, sa, sb, ta, tb);
  EXPECT_EQ(c.shape(), Shape({m, n}));
  EXPECT_LT(rel_error(to_vec(c), matmul_ref(a, b, m, k, n)), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Transposes, MatmulTest, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

Vec linear_ref(const Vec& x, const Vec& w, const Vec& b, int64_t n, int64_t in, int64_t out) {
  Vec y = matmul_ref(x, transpose(w, out, in), n, in, out);
  for (size_t i = 0; i < y.size(); ++i) y[i] += b[i % static_cast<size_t>(out)];
  return y;
}

TEST(Linear, ForwardBackwardMatchReferenceAndFiniteDifferences) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 3, 2}, {5, 9, 4}, {16, 33, 10}}) {
    Vec x = random_vec(static_cast<size_t>(n * in), 3), w = random_vec(static_cast<size_t>(out * in), 4);
    Vec b = random_vec(static_cast<size_t>(out), 5), r = random_vec(static_cast<size_t>(n * out), 6);
    Tensor tx = to_tensor(x, {n, in}), tw = to_tensor(w, {out, in}), tr = to_tensor(r, {n, out});
    Tensor y = linear_forward(ctx, tx, tw, to_tensor(b, {out}));
    EXPECT_LT(rel_error(to_vec(y), linear_ref(x, w, b, n, in, out)), 1e-4);
    Tensor y_nobias = linear_forward(ctx, tx, tw);
    EXPECT_LT(rel_error(to_vec(y_nobias), matmul_ref(x, transpose(w, out, in), n, in, out)), 1e-4);

    Tensor dx = linear_backward_data(ctx, tr, tw);
    LinearWeightGrads g = linear_backward_weights(ctx, tx, tr, true);
    EXPECT_LT(rel_error(to_vec(dx), matmul_ref(r, w, n, out, in)), 1e-4);
    EXPECT_LT(rel_error(to_vec(g.dw), matmul_ref(transpose(r, n, out), x, out, n, in)), 1e-4);
    EXPECT_FALSE(linear_backward_weights(ctx, tx, tr, false).db.defined());

    Vec fd_x = fd_gradient([&](const Vec& v) { return linear_ref(v, w, b, n, in, out); }, x, r);
    Vec fd_w = fd_gradient([&](const Vec& v) { return linear_ref(x, v, b, n, in, out); }, w, r);
    Vec fd_b = fd_gradient([&](const Vec& v) { return linear_ref(x, w, v, n, in, out); }, b, r);
    EXPECT_LT(rel_norm_error(to_vec(dx), fd_x), 1e-3);
    EXPECT_LT(rel_norm_error(to_vec(g.dw), fd_w), 1e-3);
    EXPECT_LT(rel_norm_error(to_vec(g.db), fd_b), 1e-3);
  }
}

}  // namespace
}  // namespace tandem::backend::testing
