// composite.h's layers and kl_div (index_select, rms_norm, group_norm, conv1d, pad, kl_div) and
// Variable::item against double references written from PyTorch's definitions, their gradients
// against central differences, and their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd/composite.h"
#include "engine/autograd/gradcheck.h"
#include "engine/backend/factories.h"
#include "tests/autograd/autograd_test_util.h"

namespace tandem::autograd {
namespace {

using tandem::testing::random_tensor;
using Fn = std::function<Variable(const std::vector<Variable>&)>;

Tensor i64_tensor(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

class CompositeLayersTest : public tandem::testing::OpTest {
 protected:
  void expect_values(const Tensor& got, const std::vector<double>& want, double tol, const char* what) {
    const std::vector<float> g = got.to_vector();
    ASSERT_EQ(g.size(), want.size()) << what;
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << what << " element " << i;
  }
};

TEST_F(CompositeLayersTest, IndexSelectTakesSlicesInIndexOrderAlongAnyDim) {
  const Tensor x = random_tensor({3, 4, 5}, 1);
  const std::vector<float> v = x.to_vector();
  const Tensor index = i64_tensor({2, 0, 2});
  for (int dim : {0, 1, -1}) {
    const Tensor y = index_select(ctx_, Variable(x), dim, index).value();
    const int d = dim < 0 ? dim + 3 : dim;
    int64_t sizes[] = {3, 4, 5};
    sizes[d] = 3;
    ASSERT_EQ(y.shape(), (Shape{sizes[0], sizes[1], sizes[2]}));
    std::vector<double> want;
    for (int64_t i = 0; i < sizes[0]; ++i) {
      for (int64_t j = 0; j < sizes[1]; ++j) {
        for (int64_t k = 0; k < sizes[2]; ++k) {
          int64_t at[] = {i, j, k};
          at[d] = index.data<int64_t>()[at[d]];
          want.push_back(v[static_cast<size_t>((at[0] * 4 + at[1]) * 5 + at[2])]);
        }
      }
    }
    expect_values(y, want, 0.0, "index_select");
    // The repeated index 2 takes the sum of both copies' gradients.
    expect_grads([&](const auto& in) { return index_select(ctx_, in[0], dim, index); }, {x}, "index_select");
  }
  expect_error([&] { index_select(ctx_, Variable(x), 1, i64_tensor({0, 4})); },
               "index 4 at position 1 is out of range for dimension 1 of size 4");
  expect_error([&] { index_select(ctx_, Variable(x), 0, i64_tensor({-1})); }, "negative indices are not taken");
  expect_error([&] { index_select(ctx_, Variable(x), 0, Tensor::zeros({2})); }, "int64 tensor");
  expect_error([&] { index_select(ctx_, Variable(x), 3, index); }, "index_select");
}

TEST_F(CompositeLayersTest, RmsNormDividesByTheRootMeanSquare) {
  const Tensor x = random_tensor({2, 3, 4}, 2, -2.0f, 2.0f), w = random_tensor({3, 4}, 3, 0.5f, 1.5f);
  const std::vector<float> xv = x.to_vector(), wv = w.to_vector();
  for (int dims : {1, 2}) {
    const int64_t group = dims == 1 ? 4 : 12;
    const Variable weight = dims == 2 ? Variable(w) : Variable();
    const Tensor y = rms_norm(ctx_, Variable(x), dims, weight).value();
    std::vector<double> want;
    for (size_t g = 0; g < xv.size() / group; ++g) {
      double ms = 0.0;
      for (int64_t k = 0; k < group; ++k) ms += std::pow(xv[g * group + k], 2) / group;
      const double r = 1.0 / std::sqrt(ms + std::numeric_limits<float>::epsilon());
      for (int64_t k = 0; k < group; ++k) want.push_back(xv[g * group + k] * r * (dims == 2 ? wv[k] : 1.0));
    }
    expect_values(y, want, 1e-5, "rms_norm");
  }
  expect_grads([&](const auto& in) { return rms_norm(ctx_, in[0], 2, in[1], 1e-3f); }, {x, w}, "rms_norm");
  expect_error([&] { rms_norm(ctx_, Variable(x), 1, Variable(w)); }, "weight [3, 4] must have the normalized");
  expect_error([&] { rms_norm(ctx_, Variable(x), 4); }, "normalized_dims 4 must be in [1, 3]");
}

TEST_F(CompositeLayersTest, GroupNormNormalisesEachGroupThenScalesEachChannel) {
  const Tensor x = random_tensor({2, 6, 3, 2}, 4, -2.0f, 3.0f);
  const Tensor w = random_tensor({6}, 5, 0.5f, 1.5f), b = random_tensor({6}, 6);
  const std::vector<float> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
  const Tensor y = group_norm(ctx_, Variable(x), 3, Variable(w), Variable(b)).value();
  std::vector<double> want(xv.size());
  const size_t group = 2 * 6;  // two channels of 3 x 2
  for (size_t g = 0; g < xv.size() / group; ++g) {
    double m = 0.0, v = 0.0;
    for (size_t k = 0; k < group; ++k) m += xv[g * group + k] / static_cast<double>(group);
    for (size_t k = 0; k < group; ++k) v += std::pow(xv[g * group + k] - m, 2) / static_cast<double>(group);
    for (size_t k = 0; k < group; ++k) {
      const size_t c = (g % 3) * 2 + k / 6;
      want[g * group + k] = (xv[g * group + k] - m) / std::sqrt(v + 1e-5) * wv[c] + bv[c];
    }
  }
  expect_values(y, want, 1e-5, "group_norm");
  expect_grads([&](const auto& in) { return group_norm(ctx_, in[0], 3, in[1], in[2]); }, {x, w, b}, "group_norm");
  EXPECT_EQ(group_norm(ctx_, Variable(Tensor::empty({0, 6, 3})), 3).shape(), (Shape{0, 6, 3}));  // an empty batch
  expect_error([&] { group_norm(ctx_, Variable(x), 4); }, "C divisible by groups 4");
  expect_error([&] { group_norm(ctx_, Variable(x), 3, Variable(b), Variable(random_tensor({3}, 1))); },
               "must have shape [6]");
}

// y[n][o][t] = b[o] + sum over c in o's group, r: w[o][c][r] x[n][g c0 + c][t stride + r dilation - padding].
std::vector<double> conv1d_reference(const Tensor& x, const Tensor& w, const Tensor& b, const Conv1dParams& p) {
  const std::vector<float> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
  const int64_t n = x.shape()[0], c = x.shape()[1], l = x.shape()[2];
  const int64_t k = w.shape()[0], cg = w.shape()[1], r = w.shape()[2];
  const int64_t out_l = (l + 2 * p.padding - p.dilation * (r - 1) - 1) / p.stride + 1, kg = k / p.groups;
  std::vector<double> y;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < k; ++o) {
      for (int64_t t = 0; t < out_l; ++t) {
        double acc = bv[static_cast<size_t>(o)];
        for (int64_t ci = 0; ci < cg; ++ci) {
          for (int64_t q = 0; q < r; ++q) {
            const int64_t at = t * p.stride + q * p.dilation - p.padding, ch = (o / kg) * cg + ci;
            if (at < 0 || at >= l) continue;
            acc += wv[static_cast<size_t>((o * cg + ci) * r + q)] * xv[static_cast<size_t>((i * c + ch) * l + at)];
          }
        }
        y.push_back(acc);
      }
    }
  }
  return y;
}

TEST_F(CompositeLayersTest, Conv1dMatchesTheDirectSumWithStridePaddingDilationAndGroups) {
  const Tensor x = random_tensor({2, 4, 11}, 7), w = random_tensor({6, 2, 3}, 8), b = random_tensor({6}, 9);
  const Conv1dParams p{2, 1, 2, 2};  // stride, padding, dilation, groups
  const Tensor y = conv1d(ctx_, Variable(x), Variable(w), Variable(b), p).value();
  EXPECT_EQ(y.shape(), (Shape{2, 6, 5}));
  expect_values(y, conv1d_reference(x, w, b, p), 1e-5, "conv1d");
  const Tensor one = random_tensor({4, 11}, 10);
  const Tensor y1 = conv1d(ctx_, Variable(one), Variable(w), Variable(b), p).value();
  EXPECT_EQ(y1.shape(), (Shape{6, 5}));
  expect_values(y1, conv1d_reference(one.reshape({1, 4, 11}), w, b, p), 1e-5, "conv1d (C, L)");
  expect_grads([&](const auto& in) { return conv1d(ctx_, in[0], in[1], in[2], p); }, {x, w, b}, "conv1d");
  expect_error([&] { conv1d(ctx_, Variable(x), Variable(random_tensor({6, 2, 3, 1}, 1)), {}, p); },
               "weight (K, C / groups, R)");
}

TEST_F(CompositeLayersTest, PadConstantReflectReplicateAndCircularAsPyTorch) {
  const Tensor x = random_tensor({2, 4}, 11);
  const std::vector<float> v = x.to_vector();
  auto row = [&](int64_t r, std::vector<int64_t> cols) {
    std::vector<double> out;
    for (int64_t c : cols) out.push_back(c < 0 ? 9.0 : v[static_cast<size_t>(r * 4 + c)]);
    return out;
  };
  auto rows = [&](std::vector<int64_t> cols) {
    std::vector<double> out = row(0, cols), second = row(1, cols);
    out.insert(out.end(), second.begin(), second.end());
    return out;
  };
  const int64_t last[] = {2, 1};
  // F.pad(x, (2, 1), value=9): [9 9 x0 x1 x2 x3 9]; reflect: [x2 x1 | x0 .. x3 | x2]; replicate: [x0 x0 | .. | x3];
  // circular: [x2 x3 | .. | x0].
  expect_values(pad(ctx_, Variable(x), last, PadMode::kConstant, 9.0f).value(), rows({-1, -1, 0, 1, 2, 3, -1}), 0.0,
                "constant");
  expect_values(pad(ctx_, Variable(x), last, PadMode::kReflect).value(), rows({2, 1, 0, 1, 2, 3, 2}), 0.0, "reflect");
  expect_values(pad(ctx_, Variable(x), last, PadMode::kReplicate).value(), rows({0, 0, 0, 1, 2, 3, 3}), 0.0,
                "replicate");
  expect_values(pad(ctx_, Variable(x), last, PadMode::kCircular).value(), rows({2, 3, 0, 1, 2, 3, 0}), 0.0,
                "circular");
  const int64_t crop[] = {-1, 0, 1, -1};  // last dim: drop its first column; rows: one of 9s above, drop the last
  const Tensor cropped = pad(ctx_, Variable(x), crop, PadMode::kConstant, 9.0f).value();
  EXPECT_EQ(cropped.shape(), (Shape{2, 3}));
  expect_values(cropped, {9, 9, 9, v[1], v[2], v[3]}, 0.0, "negative pads");
  for (PadMode mode : {PadMode::kConstant, PadMode::kReflect, PadMode::kReplicate, PadMode::kCircular}) {
    const int64_t both[] = {3, 2, 1, 1};
    expect_grads([&](const auto& in) { return pad(ctx_, in[0], both, mode, 0.5f); }, {x}, "pad");
  }
  const int64_t too_far[] = {4, 0};
  expect_error([&] { pad(ctx_, Variable(x), too_far, PadMode::kReflect); }, "to be at most 3");
  const int64_t negative[] = {-1, 0};
  expect_error([&] { pad(ctx_, Variable(x), negative, PadMode::kCircular); }, "takes no negative pad");
  const int64_t odd[] = {1, 1, 1};
  expect_error([&] { pad(ctx_, Variable(x), odd); }, "even number of values");
  const int64_t gone[] = {-3, -2};
  expect_error([&] { pad(ctx_, Variable(x), gone); }, "leave a negative size");
}

TEST_F(CompositeLayersTest, KlDivIsZeroWhereTheTargetIsAndHasPyTorchsReductions) {
  const Tensor logits = random_tensor({3, 4}, 12, -1.0f, 1.0f);
  const Tensor input = log_softmax(ctx_, Variable(logits), 1).value();
  Tensor target = random_tensor({3, 4}, 13, 0.1f, 1.0f);
  target.data<float>()[5] = 0.0f;  // xlogy(0, 0) = 0, not nan
  const std::vector<float> xv = input.to_vector(), tv = target.to_vector();
  double total = 0.0;
  std::vector<double> per_element;
  for (size_t i = 0; i < xv.size(); ++i) {
    per_element.push_back(tv[i] == 0.0f ? 0.0 : tv[i] * (std::log(static_cast<double>(tv[i])) - xv[i]));
    total += per_element.back();
  }
  expect_values(kl_div(ctx_, Variable(input), Variable(target), LossReduction::kNone).value(), per_element, 1e-6,
                "kl_div none");
  expect_values(kl_div(ctx_, Variable(input), Variable(target), LossReduction::kMean).value(), {total / 12}, 1e-6,
                "kl_div mean");
  expect_values(kl_div(ctx_, Variable(input), Variable(target), LossReduction::kBatchMean).value(), {total / 3}, 1e-6,
                "kl_div batchmean");
  const Tensor log_t = random_tensor({3, 4}, 14, -3.0f, 0.0f);
  double log_total = 0.0;
  const std::vector<float> lv = log_t.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) log_total += std::exp(static_cast<double>(lv[i])) * (lv[i] - xv[i]);
  expect_values(kl_div(ctx_, Variable(input), Variable(log_t), LossReduction::kSum, true).value(), {log_total}, 1e-5,
                "kl_div log_target");
  const Tensor positive = random_tensor({3, 4}, 15, 0.2f, 1.0f);
  expect_grads([&](const auto& in) { return kl_div(ctx_, in[0], in[1], LossReduction::kBatchMean); },
               {input, positive}, "kl_div");
  expect_grads([&](const auto& in) { return kl_div(ctx_, in[0], in[1], LossReduction::kMean, true); }, {input, log_t},
               "kl_div log_target");
  expect_error([&] { mse_loss(ctx_, Variable(input), Variable(target), LossReduction::kBatchMean); },
               "kBatchMean is kl_div's alone");
}

TEST_F(CompositeLayersTest, ItemReadsTheOneValueOfAnyDtype) {
  EXPECT_EQ(Variable(backend::full(ctx_, {1, 1}, 2.5)).item(), 2.5);
  EXPECT_EQ(Variable(backend::full(ctx_, {}, -3.0, DType::kBF16)).item(), -3.0);
  EXPECT_EQ(Variable(backend::full(ctx_, {1}, 1e15, DType::kI64)).item(), 1e15);
  const Tensor x = random_tensor({2, 3}, 16);
  EXPECT_NEAR(sum(ctx_, Variable(x)).item(), [&] {
    double s = 0.0;
    for (float f : x.to_vector()) s += f;
    return s;
  }(), 1e-5);
  expect_error([&] { Variable(x).item(); }, "a tensor with one element has a value; f32[2, 3] cpu has 6");
}

}  // namespace
}  // namespace tandem::autograd
