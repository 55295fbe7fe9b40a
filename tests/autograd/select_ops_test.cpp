// The selection kernels (backend::compare, where, cast) against plain loops, with broadcasting,
// NaN and i64 operands; and the ops built on them (where, clamp, cumsum, one_hot, argmax,
// nll_loss) against references from PyTorch's definitions, their gradients against central
// differences, and their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd/composite.h"
#include "engine/autograd/gradcheck.h"
#include "engine/autograd/trace.h"
#include "engine/backend/factories.h"
#include "engine/backend/ops.h"
#include "tests/autograd/autograd_test_util.h"

namespace tandem::autograd {
namespace {

using backend::CompareOp;
using tandem::testing::random_tensor;
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor f32(const Shape& shape, const std::vector<float>& v) {
  Tensor t = Tensor::empty(shape);
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

Tensor i64(const Shape& shape, const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(shape, DType::kI64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  const T* p = t.data<T>();
  return {p, p + t.numel()};
}

class SelectOpsTest : public tandem::testing::OpTest {
 protected:
  void expect_error(const std::function<void()>& f, const std::string& part) {  // any code
    OpTest::expect_error(f, part, std::nullopt);
  }
};

TEST_F(SelectOpsTest, CompareBroadcastsAndNeverHoldsForNanButNe) {
  const Tensor a = f32({2, 3}, {1, 2, kNan, -kInf, 0, 5}), b = f32({3}, {1, 3, kNan});
  const std::vector<std::vector<uint8_t>> want = {
      {1, 0, 0, 0, 0, 0},  // eq
      {0, 1, 1, 1, 1, 1},  // ne
      {0, 1, 0, 1, 1, 0},  // lt
      {1, 1, 0, 1, 1, 0},  // le
      {0, 0, 0, 0, 0, 0},  // gt
      {1, 0, 0, 0, 0, 0},  // ge
  };
  const CompareOp ops[] = {CompareOp::kEq, CompareOp::kNe, CompareOp::kLt, CompareOp::kLe, CompareOp::kGt, CompareOp::kGe};
  for (int k = 0; k < 6; ++k) {
    const Tensor y = backend::compare(ctx_, ops[k], a, b);
    EXPECT_EQ(y.dtype(), DType::kU8);
    EXPECT_EQ(values<uint8_t>(y), want[static_cast<size_t>(k)]) << "op " << k;
  }
  const Tensor ids = i64({4}, {int64_t{1} << 60, 3, -7, 3});
  EXPECT_EQ(values<uint8_t>(backend::compare(ctx_, CompareOp::kEq, ids, 3.0)), (std::vector<uint8_t>{0, 1, 0, 1}));
  EXPECT_EQ(values<uint8_t>(backend::compare(ctx_, CompareOp::kGt, ids, i64({1}, {(int64_t{1} << 60) - 1}))),
            (std::vector<uint8_t>{1, 0, 0, 0}));  // counted in integers, not doubles
  expect_error([&] { backend::compare(ctx_, CompareOp::kEq, a, ids); }, "b");
}

TEST_F(SelectOpsTest, WhereTakesEachBranchAndKeepsTheOtherOut) {
  const Tensor cond = backend::compare(ctx_, CompareOp::kGt, f32({3, 1}, {1, -1, 2}), 0.0);  // rows 0 and 2
  const Tensor a = f32({1, 2}, {kInf, 7}), b = f32({3, 2}, {1, 2, kNan, 4, 5, 6});
  const Tensor y = backend::where(ctx_, cond, a, b);
  const std::vector<float> got = values<float>(y);
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0], kInf);
  EXPECT_EQ(got[1], 7.0f);
  EXPECT_TRUE(std::isnan(got[2]));
  EXPECT_EQ(got[3], 4.0f);
  EXPECT_EQ(got[4], kInf);
  EXPECT_EQ(got[5], 7.0f);
  const Tensor x = random_tensor({3, 2}, 1), z = random_tensor({2}, 2);
  expect_grads([&](const auto& v) { return where(ctx_, cond, v[0], v[1]); }, {x, z}, "where");
  // The gradient of a branch is the upstream's where it was taken, summed over its broadcast.
  Variable va(x, true), vz(z, true);
  sum(ctx_, where(ctx_, cond, va, vz)).backward(&ctx_);
  EXPECT_EQ(values<float>(va.grad()), (std::vector<float>{1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(values<float>(vz.grad()), (std::vector<float>{1, 1}));
}

TEST_F(SelectOpsTest, CastTruncatesTowardZeroAndMarksTheUndefined) {
  const Tensor x = f32({6}, {2.9f, -2.9f, kNan, kInf, 1e19f, -0.5f});
  const std::vector<int64_t> want{2, -2, INT64_MIN, INT64_MIN, INT64_MIN, 0};
  EXPECT_EQ(values<int64_t>(backend::cast(ctx_, x, DType::kI64)), want);
  EXPECT_EQ(values<float>(backend::cast(ctx_, i64({2}, {-3, int64_t{1} << 40}), DType::kF32)),
            (std::vector<float>{-3.0f, 1099511627776.0f}));
  const Tensor mask = backend::compare(ctx_, CompareOp::kGt, x, 0.0);
  EXPECT_EQ(values<int64_t>(backend::cast(ctx_, mask, DType::kI64)), (std::vector<int64_t>{1, 0, 0, 1, 1, 0}));
  expect_error([&] { backend::cast(ctx_, x, DType::kBF16); }, "to bf16 is not implemented");
}

TEST_F(SelectOpsTest, ClampAsPyTorchIncludingItsGradientAndMinAboveMax) {
  const Tensor x = f32({6}, {-2, -0.5f, 0, 0.25f, 3, kNan});
  EXPECT_EQ(values<float>(clamp(ctx_, Variable(x), -1.0f, 1.0f).value()).size(), 6u);
  const std::vector<float> y = values<float>(clamp(ctx_, Variable(x), -1.0f, 1.0f).value());
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 5), (std::vector<float>{-1, -0.5f, 0, 0.25f, 1}));
  EXPECT_TRUE(std::isnan(y[5]));
  EXPECT_EQ(values<float>(clamp(ctx_, Variable(x), std::nullopt, 0.0f).value())[4], 0.0f);
  EXPECT_EQ(values<float>(clamp(ctx_, Variable(x), 2.0f, 1.0f).value())[0], 1.0f);  // min > max: max
  Variable v(random_tensor({4, 5}, 3, -2.0f, 2.0f), true);
  sum(ctx_, clamp(ctx_, v, -1.0f, 1.0f)).backward(&ctx_);
  const std::vector<float> xv = values<float>(v.value()), g = values<float>(v.grad());
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_EQ(g[i], std::abs(xv[i]) <= 1.0f ? 1.0f : 0.0f) << xv[i];
  Variable with_nan(x, true);  // a NaN passes no gradient, as in PyTorch
  sum(ctx_, clamp(ctx_, with_nan, -1.0f, 1.0f)).backward(&ctx_);
  EXPECT_EQ(values<float>(with_nan.grad()), (std::vector<float>{0, 1, 1, 1, 0, 0}));
  expect_error([&] { clamp(ctx_, Variable(x), std::nullopt, std::nullopt); }, "at least one of min and max");
}

TEST_F(SelectOpsTest, CumsumAddsPrefixesAlongAnyDim) {
  const Tensor x = random_tensor({3, 7, 2}, 4);
  const std::vector<float> v = values<float>(x);
  for (int dim : {0, 1, -1}) {
    const int d = dim < 0 ? dim + 3 : dim;
    const std::vector<float> y = values<float>(cumsum(ctx_, Variable(x), dim).value());
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 7; ++j) {
        for (int64_t k = 0; k < 2; ++k) {
          double want = 0.0;
          int64_t at[] = {i, j, k};
          const int64_t end = at[d];
          for (int64_t p = 0; p <= end; ++p) {
            at[d] = p;
            want += v[static_cast<size_t>((at[0] * 7 + at[1]) * 2 + at[2])];
          }
          EXPECT_NEAR(y[static_cast<size_t>((i * 7 + j) * 2 + k)], want, 1e-5) << "dim " << dim;
        }
      }
    }
    expect_grads([&](const auto& in) { return cumsum(ctx_, in[0], dim); }, {x}, "cumsum");
  }
}

TEST_F(SelectOpsTest, OneHotAndItsChecks) {
  const Tensor ids = i64({2, 2}, {0, 3, 2, 3});
  const Tensor y = one_hot(ctx_, ids);
  EXPECT_EQ(y.dtype(), DType::kI64);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(one_hot(ctx_, ids, 6).shape(), (Shape{2, 2, 6}));
  expect_error([&] { one_hot(ctx_, ids, 3); }, "id 3 at position 1 is outside [0, 3)");
  expect_error([&] { one_hot(ctx_, i64({1}, {-1}), 3); }, "id -1 at position 0");
  expect_error([&] { one_hot(ctx_, Tensor::empty({0}, DType::kI64)); }, "cannot infer the number of classes");
}

TEST_F(SelectOpsTest, ArgmaxTakesTheFirstMaximumAndANan) {
  const Tensor x = f32({2, 4}, {1, 5, 5, 2, 3, kNan, 9, kNan});
  EXPECT_EQ(values<int64_t>(argmax(ctx_, Variable(x), 1)), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(values<int64_t>(argmax(ctx_, Variable(x), 0)), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(argmax(ctx_, Variable(x), -1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(values<int64_t>(argmax(ctx_, Variable(f32({2, 3}, {0, 4, 1, 7, 2, 7})))), (std::vector<int64_t>{3}));
  const Tensor r = random_tensor({3, 5, 4}, 5);
  const std::vector<float> rv = values<float>(r);
  const std::vector<int64_t> got = values<int64_t>(argmax(ctx_, Variable(r), 1));
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t k = 0; k < 4; ++k) {
      int64_t best = 0;
      for (int64_t j = 1; j < 5; ++j) {
        if (rv[static_cast<size_t>((i * 5 + j) * 4 + k)] > rv[static_cast<size_t>((i * 5 + best) * 4 + k)]) best = j;
      }
      EXPECT_EQ(got[static_cast<size_t>(i * 4 + k)], best);
    }
  }
  expect_error([&] { argmax(ctx_, Variable(Tensor::empty({2, 0})), 1); }, "is empty");
}

TEST_F(SelectOpsTest, NllLossPicksTheTargetsLogProbabilityAndIgnores) {
  const Tensor logits = random_tensor({4, 5}, 6);
  const Tensor lp = log_softmax(ctx_, Variable(logits), 1).value();
  const std::vector<float> v = values<float>(lp);
  const Tensor target = i64({4}, {2, -100, 0, 4});
  const double want_sum = -(v[2] + v[10] + v[19]);
  EXPECT_NEAR(nll_loss(ctx_, Variable(lp), target).item(), want_sum / 3, 1e-6);
  EXPECT_NEAR(nll_loss(ctx_, Variable(lp), target, -100, LossReduction::kSum).item(), want_sum, 1e-6);
  const std::vector<float> rows = values<float>(nll_loss(ctx_, Variable(lp), target, -100, LossReduction::kNone).value());
  EXPECT_EQ(rows, (std::vector<float>{-v[2], 0.0f, -v[10], -v[19]}));
  // An ignore_index inside [0, C) ignores that class's rows.
  EXPECT_NEAR(nll_loss(ctx_, Variable(lp), i64({4}, {2, 4, 0, 4}), 4, LossReduction::kSum).item(), -(v[2] + v[10]),
              1e-6);
  // Equal to cross-entropy on the logits.
  const Tensor labels = i64({4}, {2, 1, 0, 4});
  EXPECT_NEAR(nll_loss(ctx_, log_softmax(ctx_, Variable(logits), 1), labels).item(),
              mean(ctx_, softmax_cross_entropy(ctx_, Variable(logits), labels), {}, false).item(), 1e-5);
  expect_grads([&](const auto& in) { return nll_loss(ctx_, in[0], target); }, {lp}, "nll_loss");
  expect_error([&] { nll_loss(ctx_, Variable(lp), i64({4}, {2, 5, 0, 0})); },
               "target 5 at position 1 is outside [0, 5) and is not ignore_index -100");
  expect_error([&] { nll_loss(ctx_, Variable(lp), i64({3}, {0, 0, 0})); }, "expects input (N, C)");
  EXPECT_TRUE(std::isnan(nll_loss(ctx_, Variable(lp), i64({4}, {-100, -100, -100, -100})).item()));
}

TEST_F(SelectOpsTest, GatherPicksAlongDimAndSumsRepeatsInItsGradient) {
  const Tensor x = random_tensor({3, 4}, 8);
  const std::vector<float> v = values<float>(x);
  // torch.gather(x, 1, [[0, 0, 3], [1, 2, 1]]): rows 0 and 1 only (the index may be smaller).
  const Tensor index = i64({2, 3}, {0, 0, 3, 1, 2, 1});
  const Tensor y = gather(ctx_, Variable(x), 1, index).value();
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{v[0], v[0], v[3], v[5], v[6], v[5]}));
  const Tensor rows = i64({2, 4}, {2, 0, 1, 2, 0, 0, 0, 0});  // along dim 0
  EXPECT_EQ(values<float>(gather(ctx_, Variable(x), 0, rows).value()),
            (std::vector<float>{v[8], v[1], v[6], v[11], v[0], v[1], v[2], v[3]}));
  Variable vx(x, true);
  sum(ctx_, gather(ctx_, vx, 1, index)).backward(&ctx_);
  EXPECT_EQ(values<float>(vx.grad()), (std::vector<float>{2, 0, 0, 1, 0, 2, 1, 0, 0, 0, 0, 0}));
  expect_grads([&](const auto& in) { return gather(ctx_, in[0], -1, index); }, {x}, "gather");
  expect_grads([&](const auto& in) { return gather(ctx_, in[0], 0, rows); }, {x}, "gather dim 0");
  expect_error([&] { gather(ctx_, Variable(x), 1, i64({1, 1}, {4})); },
               "index 4 at position 0 is out of range for dimension 1 of x [3, 4] (size 4)");
  expect_error([&] { gather(ctx_, Variable(x), 1, i64({4, 1}, {0, 0, 0, 0})); },
               "index [4, 1] is larger than x [3, 4] in dimension 0");
  expect_error([&] { gather(ctx_, Variable(x), 1, i64({3}, {0, 0, 0})); }, "index");
}

TEST_F(SelectOpsTest, TopkTakesTheBestFirstWithNanLargestAndTiesToTheLowerIndex) {
  const Tensor x = f32({2, 5}, {3, 1, 3, kNan, -kInf, 0, 2, 2, 7, -1});
  const TopK top = topk(ctx_, Variable(x), 3);
  EXPECT_EQ(top.indices.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(top.indices), (std::vector<int64_t>{3, 0, 2, 3, 1, 2}));
  const std::vector<float> tv = values<float>(top.values.value());
  EXPECT_TRUE(std::isnan(tv[0]));
  EXPECT_EQ(std::vector<float>(tv.begin() + 1, tv.end()), (std::vector<float>{3, 3, 7, 2, 2}));
  EXPECT_EQ(values<int64_t>(topk(ctx_, Variable(x), 2, 1, false).indices), (std::vector<int64_t>{4, 1, 4, 0}));
  EXPECT_EQ(values<int64_t>(topk(ctx_, Variable(x), 1, 0).indices), (std::vector<int64_t>{0, 1, 0, 0, 1}));
  EXPECT_EQ(topk(ctx_, Variable(x), 0).indices.shape(), (Shape{2, 0}));
  // Against a sort of each row of random values, along dim 1 of a 3-D tensor.
  const Tensor r = random_tensor({2, 6, 3}, 9);
  const std::vector<float> rv = values<float>(r);
  const std::vector<int64_t> got = values<int64_t>(topk(ctx_, Variable(r), 4, 1).indices);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t c = 0; c < 3; ++c) {
      std::vector<int64_t> order{0, 1, 2, 3, 4, 5};
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return rv[static_cast<size_t>((i * 6 + a) * 3 + c)] > rv[static_cast<size_t>((i * 6 + b) * 3 + c)];
      });
      for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(got[static_cast<size_t>((i * 4 + j) * 3 + c)], order[j]);
    }
  }
  expect_grads([&](const auto& in) { return topk(ctx_, in[0], 2, 1).values; }, {r}, "topk");
  expect_error([&] { topk(ctx_, Variable(x), 6); }, "k 6 is outside [0, 5]");
}

// A trace would keep their masks and indices as constants of the example input: they refuse.
TEST_F(SelectOpsTest, OpsWithInputDependentMasksRefuseToBeTraced) {
  Tracer tracer;
  TraceGuard guard(tracer);
  const Variable x(random_tensor({2, 3}, 7));
  const std::function<void()> calls[] = {
      [&] { clamp(ctx_, x, 0.0f, std::nullopt); },
      [&] { argmax(ctx_, x, 1); },
      [&] { one_hot(ctx_, i64({2}, {0, 1}), 3); },
      [&] { nll_loss(ctx_, x, i64({2}, {0, 1})); },
  };
  for (const auto& call : calls) {
    try {
      call();
      ADD_FAILURE() << "traced";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << e.what();
      EXPECT_NE(std::string(e.what()).find("export_onnx does not write"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem::autograd
