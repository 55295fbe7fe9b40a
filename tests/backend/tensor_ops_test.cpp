// The N-D ops of the CPU backend against the double references of nd_ref_util.h: permute, expand,
// narrow and concat, broadcasting arithmetic, the unary functions and their derivatives,
// masked_fill, reductions (and the max's gradient), softmax and log_softmax with their backward
// against finite differences, on odd sizes and several layouts of the reduced dimension.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/backend/backend_test_util.h"
#include "tests/backend/nd_ref_util.h"

namespace tandem::backend::testing {
namespace {

class TensorOpsTest : public ::testing::Test {
 protected:
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_F(TensorOpsTest, PermuteMatchesTheReference) {
  struct Case {
    Shape shape;
    std::vector<int> perm;
  };
  for (const Case& c : {Case{{2, 3, 4}, {2, 0, 1}}, Case{{2, 3, 4, 5}, {0, 2, 1, 3}}, Case{{3, 5, 7}, {1, 2, 0}},
                        Case{{6}, {0}}, Case{{2, 1, 3, 4, 5}, {4, 3, 2, 1, 0}}}) {
    Vec x = random_vec(static_cast<size_t>(c.shape.numel()), 1);
    Tensor y = permute(ctx_, to_tensor(x, c.shape), c.perm);
    EXPECT_EQ(to_vec(y), permute_ref(x, c.shape, c.perm)) << c.shape.str();
  }
  // Any dtype moves by size: i64 ids too, and negative dimensions count from the end.
  Tensor ids = Tensor::empty({2, 3}, DType::kI64);
  for (int64_t i = 0; i < 6; ++i) ids.data<int64_t>()[i] = 100 + i;
  const int swap[] = {-1, 0};
  Tensor t = permute(ctx_, ids, swap);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.data<int64_t>()[1], 103);
}

TEST_F(TensorOpsTest, ExpandAndBroadcastingArithmeticMatchTheReference) {
  struct Case {
    Shape a, b;
  };
  for (const Case& c : {Case{{3, 1, 5}, {4, 1}}, Case{{2, 3, 4}, {3, 4}}, Case{{2, 3, 4}, {2, 1, 4}},
                        Case{{7, 9}, {7, 9}}, Case{{1}, {5, 3}}, Case{{5, 1}, {1, 6}}}) {
    Vec a = random_vec(static_cast<size_t>(c.a.numel()), 2, 0.5, 2.0);
    Vec b = random_vec(static_cast<size_t>(c.b.numel()), 3, 0.5, 2.0);
    const Shape out = broadcast_shapes("test", c.a, c.b);
    Vec ea = expand_ref(a, c.a, out), eb = expand_ref(b, c.b, out);
    EXPECT_EQ(to_vec(expand(ctx_, to_tensor(a, c.a), out)), ea) << c.a.str();
    for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv}) {
      Vec want(ea.size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = binary_ref(op, ea[i], eb[i]);
      Tensor y = binary(ctx_, op, to_tensor(a, c.a), to_tensor(b, c.b));
      EXPECT_EQ(y.shape(), out);
      EXPECT_LT(rel_error(to_vec(y), want), 1e-6) << c.a.str() << " " << c.b.str() << " op " << static_cast<int>(op);
    }
  }
  expect_error([&] { binary(ctx_, BinaryOp::kAdd, Tensor::zeros({3, 4}), Tensor::zeros({5})); },
               ErrorCode::kInvalidArgument, {"binary", "[3, 4]", "[5]", "do not broadcast"});
}

TEST_F(TensorOpsTest, NarrowAndConcatRoundTrip) {
  const Shape s{3, 7, 5};
  Vec x = random_vec(static_cast<size_t>(s.numel()), 4);
  Tensor t = to_tensor(x, s);
  Tensor a = narrow(ctx_, t, 1, 0, 2), b = narrow(ctx_, t, -2, 2, 4), c = narrow(ctx_, t, 1, 6, 1);
  EXPECT_EQ(b.shape(), (Shape{3, 4, 5}));
  EXPECT_EQ(to_vec(b)[0], x[2 * 5]);
  const Tensor parts[] = {a, b, c};
  EXPECT_EQ(to_vec(concat(ctx_, parts, 1)), x);
  expect_error([&] { narrow(ctx_, t, 1, 5, 3); }, ErrorCode::kInvalidArgument, {"narrow", "[5, 8)", "size 7"});
}

TEST_F(TensorOpsTest, UnaryFunctionsAndTheirDerivativesMatchTheReference) {
  const Shape s{3, 17};
  for (UnaryOp op : {UnaryOp::kExp, UnaryOp::kLog, UnaryOp::kSqrt, UnaryOp::kRsqrt, UnaryOp::kTanh,
                     UnaryOp::kGeluErf, UnaryOp::kGeluTanh, UnaryOp::kSigmoid, UnaryOp::kSilu, UnaryOp::kAbs,
                     UnaryOp::kSin, UnaryOp::kCos}) {
    const bool positive = op == UnaryOp::kLog || op == UnaryOp::kSqrt || op == UnaryOp::kRsqrt;
    Vec x = random_vec(static_cast<size_t>(s.numel()), 5, positive ? 0.1 : -3.0, 3.0);
    Vec dy = random_vec(x.size(), 6);
    Tensor xt = to_tensor(x, s);
    Tensor y = unary(ctx_, op, xt);
    Tensor dx = unary_backward(ctx_, op, xt, y, to_tensor(dy, s));
    Vec want(x.size()), want_dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      want[i] = unary_ref(op, x[i]);
      want_dx[i] = dy[i] * unary_grad_ref(op, x[i]);
    }
    EXPECT_LT(rel_error(to_vec(y), want), 1e-5) << static_cast<int>(op);
    EXPECT_LT(rel_error(to_vec(dx), want_dx), 1e-4) << static_cast<int>(op);
  }
}

TEST_F(TensorOpsTest, MaskedFillBroadcastsItsMask) {
  Tensor x = to_tensor(random_vec(12, 7), {2, 2, 3});
  Tensor mask = Tensor::zeros({2, 1, 3}, DType::kU8);
  mask.data<uint8_t>()[1] = 1;
  mask.data<uint8_t>()[5] = 1;
  Vec y = to_vec(masked_fill(ctx_, x, mask, -7.0f)), xv = to_vec(x);
  for (int64_t i = 0; i < 12; ++i) {
    const int64_t b = i / 6, j = i % 3;
    const bool filled = mask.data<uint8_t>()[b * 3 + j] != 0;
    EXPECT_EQ(y[static_cast<size_t>(i)], filled ? -7.0 : xv[static_cast<size_t>(i)]) << i;
  }
}

TEST_F(TensorOpsTest, ReductionsOverDimensionsMatchTheReference) {
  const Shape s{4, 5, 6};
  Vec x = random_vec(static_cast<size_t>(s.numel()), 8);
  Tensor t = to_tensor(x, s);
  for (Reduction r : {Reduction::kSum, Reduction::kMean, Reduction::kMax}) {
    for (int axis = 0; axis < 3; ++axis) {
      Tensor y = reduce(ctx_, r, t, std::span<const int>(&axis, 1), true);
      Shape kept = s;
      kept[axis] = 1;
      EXPECT_EQ(y.shape(), kept);
      EXPECT_LT(rel_error(to_vec(y), reduce_ref(r, x, s, axis)), 1e-6) << static_cast<int>(r) << " axis " << axis;
    }
    const int both[] = {0, -1};
    Tensor y = reduce(ctx_, r, t, both, false);
    EXPECT_EQ(y.shape(), (Shape{5}));
    Vec step = reduce_ref(r, reduce_ref(r, x, s, 2), Shape{4, 5, 1}, 0);
    EXPECT_LT(rel_error(to_vec(y), step), 1e-6);
  }
  EXPECT_NEAR(to_vec(reduce(ctx_, Reduction::kSum, t, {}, false))[0], reduce_ref(Reduction::kSum, x, {s.numel()}, 0)[0],
              1e-4);
}

TEST_F(TensorOpsTest, TiedMaximaShareTheGradientAndANaNIsTheMax) {
  Tensor x = Tensor::from_vector({1, 3, 3, 2, 0, -1}, {2, 3});
  const int axis = 1;
  Tensor dy = Tensor::from_vector({6, 4}, {2, 1});
  EXPECT_EQ(to_vec(max_backward(ctx_, x, std::span<const int>(&axis, 1), dy)), (Vec{0, 3, 3, 4, 0, 0}));
  Tensor with_nan = Tensor::from_vector({1, std::numeric_limits<float>::quiet_NaN(), 5}, {1, 3});
  EXPECT_TRUE(std::isnan(to_vec(reduce(ctx_, Reduction::kMax, with_nan, std::span<const int>(&axis, 1), false))[0]));
}

TEST_F(TensorOpsTest, SoftmaxAndLogSoftmaxWithTheirBackwardMatchFiniteDifferences) {
  const Shape s{3, 4, 5};
  Vec x = random_vec(static_cast<size_t>(s.numel()), 9, -3.0, 3.0);
  Vec r = random_vec(x.size(), 10);
  for (bool log : {false, true}) {
    for (int axis : {0, 1, 2}) {
      Tensor y = softmax(ctx_, to_tensor(x, s), axis, log);
      EXPECT_LT(rel_error(to_vec(y), softmax_ref(x, s, axis, log)), 1e-6) << log << " " << axis;
      Tensor dx = softmax_backward(ctx_, y, to_tensor(r, s), axis, log);
      Vec fd = fd_gradient([&](const Vec& v) { return softmax_ref(v, s, axis, log); }, x, r);
      EXPECT_LT(rel_error(to_vec(dx), fd), 1e-4) << log << " " << axis;
    }
  }
}

}  // namespace
}  // namespace tandem::backend::testing
