// Softmax cross-entropy with label smoothing against the double reference, its stability on
// huge logits, and its gradient against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend_test_util.h"

namespace tandem::backend::testing {
namespace {

Tensor labels_tensor(const std::vector<int64_t>& labels) {
  Tensor t = Tensor::empty({static_cast<int64_t>(labels.size())}, DType::kI64);
  std::copy(labels.begin(), labels.end(), t.data<int64_t>());
  return t;
}

class SoftmaxCrossEntropyTest : public ::testing::TestWithParam<float> {
 protected:
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_P(SoftmaxCrossEntropyTest, MatchesReferenceAndFiniteDifferences) {
  float s = GetParam();
  int64_t n = 6, k = 11;
  Vec z = random_vec(static_cast<size_t>(n * k), 1, -4.0, 4.0), r = random_vec(static_cast<size_t>(n), 2);
  std::vector<int64_t> labels{0, 10, 3, 3, 7, 5};
  Tensor tl = labels_tensor(labels);
  SoftmaxCrossEntropyForward f = softmax_cross_entropy_forward(ctx_, to_tensor(z, {n, k}), tl, s);
  SoftmaxRef ref = softmax_cross_entropy_ref(z, labels, k, s);
  EXPECT_LT(rel_error(to_vec(f.loss), ref.loss), 1e-5);
  EXPECT_LT(rel_error(to_vec(f.probs), ref.probs), 1e-5);

  Tensor dz = softmax_cross_entropy_backward(ctx_, f.probs, tl, s, to_tensor(r, {n}));
  Vec fd = fd_gradient([&](const Vec& v) { return softmax_cross_entropy_ref(v, labels, k, s).loss; }, z, r);
  EXPECT_LT(rel_norm_error(to_vec(dz), fd), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Smoothing, SoftmaxCrossEntropyTest, ::testing::Values(0.0f, 0.1f, 1.0f));

TEST(SoftmaxCrossEntropy, IsStableOnHugeLogits) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  Tensor z = Tensor::from_vector({1000.0f, -1000.0f, 0.0f, 3e4f, 3e4f, -3e4f}, {2, 3});
  SoftmaxCrossEntropyForward f = softmax_cross_entropy_forward(ctx, z, labels_tensor({0, 2}), 0.0f);
  std::vector<float> loss = f.loss.to_vector();
  EXPECT_NEAR(loss[0], 0.0f, 1e-6);
  EXPECT_NEAR(loss[1], 6e4f + std::log(2.0f), 1.0f);
  for (float p : f.probs.to_vector()) EXPECT_TRUE(std::isfinite(p));
}

TEST(SoftmaxCrossEntropy, RejectsALabelOutsideTheClasses) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  Tensor z = Tensor::zeros({2, 3});
  expect_error([&] { softmax_cross_entropy_forward(ctx, z, labels_tensor({1, 3}), 0.0f); },
               ErrorCode::kInvalidArgument, {"softmax_cross_entropy_forward", "labels[1] = 3", "[0, 3)"});
}

// The training loop's top-1 count: ties count for the label, a NaN anywhere in a row never does.
TEST(ClassificationStats, ANaNRowIsWrongAndATieIsRight) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Rows: label's logit highest; a tie; every logit NaN; the label's NaN; another's NaN; beaten.
  Tensor z = Tensor::from_vector({3, 1, 2, 2, 2, 1, nan, nan, nan, nan, 1, 2, 5, nan, 1, 1, 4, 2}, {6, 3});
  Tensor stats = Tensor::zeros({3});
  Tensor loss = Tensor::from_vector({0.5f}, Shape());
  accumulate_classification_stats(ctx, loss, 2.0f, z, labels_tensor({0, 1, 0, 0, 0, 0}), stats);
  EXPECT_EQ(stats.to_vector(), (std::vector<float>{1.0f, 2.0f, 6.0f}));
}

}  // namespace
}  // namespace tandem::backend::testing
