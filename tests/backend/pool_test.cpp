// Max, average and global average pooling, forward and backward, against the double
// reference in both formats; gradients against finite differences.
#include <gtest/gtest.h>

#include "backend_test_util.h"

namespace tandem::backend::testing {
namespace {

struct PoolCase {
  Shape x;
  Pool2dParams p;
};

Pool2dParams pool(int64_t k, int64_t s, int64_t pad, bool include_pad = true) {
  Pool2dParams p;
  p.kernel = {k, k};
  p.stride = {s, s};
  p.padding = {pad, pad};
  p.count_include_pad = include_pad;
  return p;
}

std::vector<PoolCase> cases() {
  Pool2dParams uneven = pool(3, 2, 1);
  uneven.kernel = {3, 2};
  uneven.stride = {1, 2};
  uneven.padding = {1, 0};
  return {{{2, 3, 8, 8}, pool(2, 2, 0)},       {{1, 4, 9, 7}, pool(3, 2, 1)},
          {{2, 5, 7, 7}, pool(3, 2, 1, false)}, {{3, 2, 6, 5}, uneven},
          {{2, 16, 4, 4}, pool(3, 1, 1)},       {{1, 3, 5, 5}, pool(5, 1, 2, false)}};
}

class PoolTest : public ::testing::TestWithParam<std::tuple<PoolCase, MemoryFormat>> {
 protected:
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_P(PoolTest, MaxAndAverageMatchReference) {
  const auto& [c, format] = GetParam();
  Shape ys = pool2d_output_shape(c.p, c.x);
  Vec x = random_vec(static_cast<size_t>(c.x.numel()), 1);
  Vec dy = random_vec(static_cast<size_t>(ys.numel()), 2);
  Tensor tx = to_tensor(x, c.x, format), tdy = to_tensor(dy, ys, format);

  MaxPoolForward mf = max_pool2d_forward(ctx_, c.p, tx);
  EXPECT_EQ(mf.y.format(), format);
  EXPECT_LT(rel_error(to_vec(mf.y), max_pool_ref(c.p, x, c.x)), 1e-6);
  Tensor mdx = max_pool2d_backward(ctx_, c.p, tx, tdy, mf.workspace);
  EXPECT_LT(rel_error(to_vec(mdx), max_pool_backward_ref(c.p, x, c.x, dy)), 1e-6);

  Tensor ay = avg_pool2d_forward(ctx_, c.p, tx);
  EXPECT_LT(rel_error(to_vec(ay), avg_pool_ref(c.p, x, c.x)), 1e-4);
  Tensor adx = avg_pool2d_backward(ctx_, c.p, tdy, c.x);
  EXPECT_EQ(adx.format(), format);
  EXPECT_LT(rel_error(to_vec(adx), avg_pool_backward_ref(c.p, dy, c.x)), 1e-4);
}

TEST_P(PoolTest, GradientsMatchFiniteDifferences) {
  const auto& [c, format] = GetParam();
  Shape ys = pool2d_output_shape(c.p, c.x);
  Vec x = random_vec(static_cast<size_t>(c.x.numel()), 3);
  Vec r = random_vec(static_cast<size_t>(ys.numel()), 4);
  Tensor tx = to_tensor(x, c.x, format), tr = to_tensor(r, ys, format);
  // Random inputs have no ties, so the max is differentiable at x.
  Vec fd_max = fd_gradient([&](const Vec& v) { return max_pool_ref(c.p, v, c.x); }, x, r);
  Vec fd_avg = fd_gradient([&](const Vec& v) { return avg_pool_ref(c.p, v, c.x); }, x, r);
  MaxPoolForward mf = max_pool2d_forward(ctx_, c.p, tx);
  EXPECT_LT(rel_norm_error(to_vec(max_pool2d_backward(ctx_, c.p, tx, tr, mf.workspace)), fd_max), 1e-3);
  EXPECT_LT(rel_norm_error(to_vec(avg_pool2d_backward(ctx_, c.p, tr, c.x)), fd_avg), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolTest,
                         ::testing::Combine(::testing::ValuesIn(cases()),
                                            ::testing::Values(MemoryFormat::kContiguous,
                                                              MemoryFormat::kChannelsLast)));

class GlobalPoolTest : public ::testing::TestWithParam<MemoryFormat> {};

TEST_P(GlobalPoolTest, AveragesThePlaneAndSpreadsTheGradient) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  Shape xs{3, 5, 7, 6};
  Vec x = random_vec(static_cast<size_t>(xs.numel()), 7);
  Vec dy = random_vec(15, 8);
  Pool2dParams whole = pool(1, 1, 0);
  whole.kernel = {7, 6};
  Tensor y = global_avg_pool_forward(ctx, to_tensor(x, xs, GetParam()));
  EXPECT_EQ(y.shape(), Shape({3, 5, 1, 1}));
  EXPECT_LT(rel_error(to_vec(y), avg_pool_ref(whole, x, xs)), 1e-5);
  Tensor dx = global_avg_pool_backward(ctx, to_tensor(dy, {3, 5, 1, 1}, GetParam()), xs);
  EXPECT_LT(rel_error(to_vec(dx), avg_pool_backward_ref(whole, dy, xs)), 1e-5);
  Vec fd = fd_gradient([&](const Vec& v) { return avg_pool_ref(whole, v, xs); }, x, dy);
  EXPECT_LT(rel_norm_error(to_vec(dx), fd), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Formats, GlobalPoolTest,
                         ::testing::Values(MemoryFormat::kContiguous, MemoryFormat::kChannelsLast));

}  // namespace
}  // namespace tandem::backend::testing
