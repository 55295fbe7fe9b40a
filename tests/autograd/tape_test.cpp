// The tape: gradients of composed ops, accumulation, hooks, no-grad scopes and custom ops.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd/gradcheck.h"
#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

Variable param(std::vector<float> v, Shape s, std::string name = "p") {
  return Variable(Tensor::from_vector(v, s), true, std::move(name));
}

TEST(Tape, ComposedGradientIsExact) {
  ExecutionContext ctx;
  Variable a = param({1, 2, 3}, {3}, "a"), b = param({4, 5, 6}, {3}, "b");
  // loss = sum((a + b) * a): dloss/da = 2a + b, dloss/db = a
  Variable loss = sum(ctx, mul(ctx, add(ctx, a, b), a));
  EXPECT_FLOAT_EQ(loss.value().to_vector()[0], 5 + 14 + 27);
  loss.backward(&ctx);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{6, 9, 12}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{1, 2, 3}));
}

TEST(Tape, GradientsAccumulateAcrossBackwardCalls) {
  ExecutionContext ctx;
  Variable a = param({1, 2}, {2});
  sum(ctx, scale(ctx, a, 3.0f)).backward(&ctx);
  sum(ctx, scale(ctx, a, 3.0f)).backward(&ctx);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{6, 6}));
  a.zero_grad();
  EXPECT_FALSE(a.has_grad());
}

TEST(Tape, SharedParameterSumsItsUsesAndHookFiresOnceWhenFinal) {
  ExecutionContext ctx;
  Variable w = param({2, 3}, {2}, "w");
  int fired = 0;
  std::vector<float> seen;
  w.register_grad_ready_hook([&](Variable& v) {
    ++fired;
    seen = v.grad().to_vector();
  });
  // loss = sum(w * w) + sum(5 w): dloss/dw = 2w + 5
  Variable loss = add(ctx, sum(ctx, mul(ctx, w, w)), sum(ctx, scale(ctx, w, 5.0f)));
  loss.backward(&ctx);
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(seen, (std::vector<float>{9, 11}));  // already complete when the hook ran
  EXPECT_EQ(w.grad().to_vector(), seen);
}

TEST(Tape, InPlaceSumsAtForksNeverTouchASharedGradient) {
  ExecutionContext ctx;
  // add_relu hands a and b one shared gradient tensor; a is used once more, so its two gradients
  // are summed, which must not write into the tensor that b's gradient is.
  // loss = sum(relu(a + b) * r) + sum(3 a): da = r [a + b > 0] + 3, db = r [a + b > 0]
  Variable a = param({1, -2, 3, -4}, {4}, "a"), b = param({0.5f, 1, -1, 2}, {4}, "b");
  Variable r(Tensor::from_vector({1, 2, 3, 4}, {4}));
  Variable loss = add(ctx, sum(ctx, mul(ctx, add_relu(ctx, a, b), r)), sum(ctx, scale(ctx, a, 3.0f)));
  loss.backward(&ctx);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{4, 3, 6, 3}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{1, 0, 3, 0}));
  EXPECT_FALSE(a.grad().shares_storage_with(b.grad()));
}

TEST(Tape, AddReluMatchesReluOfAddAndFiniteDifferences) {
  ExecutionContext ctx(Device::cpu());
  Tensor x = Tensor::from_vector({0.5f, -1.2f, 0.3f, 2.0f, -0.7f, 1.1f}, {2, 3});
  Tensor y = Tensor::from_vector({0.2f, 0.4f, -0.9f, 0.1f, -0.3f, -0.6f}, {2, 3});
  GradCheckResult fused = check_gradients(
      ctx, [&](const std::vector<Variable>& v) { return add_relu(ctx, v[0], v[1]); }, {x, y});
  EXPECT_TRUE(fused.ok) << fused.worst;
  Variable a = param(x.to_vector(), {2, 3}, "a"), b = param(y.to_vector(), {2, 3}, "b");
  Variable c = param(x.to_vector(), {2, 3}, "c"), d = param(y.to_vector(), {2, 3}, "d");
  Variable r(Tensor::from_vector({1, -2, 3, 4, 5, -6}, {2, 3}));
  sum(ctx, mul(ctx, add_relu(ctx, a, b), r)).backward(&ctx);
  sum(ctx, mul(ctx, relu(ctx, add(ctx, c, d)), r)).backward(&ctx);
  EXPECT_EQ(a.grad().to_vector(), c.grad().to_vector());
  EXPECT_EQ(b.grad().to_vector(), d.grad().to_vector());
}

TEST(Tape, HooksFireInReverseOrderOfUse) {
  ExecutionContext ctx;
  Variable x(Tensor::from_vector({1, -2, 3, 4, 0.5f, -1}, {2, 3}));
  Variable w1 = param(std::vector<float>(12, 0.1f), {4, 3}, "w1"), w2 = param(std::vector<float>(8, 0.2f), {2, 4}, "w2");
  std::vector<std::string> order;
  for (Variable* p : {&w1, &w2}) p->register_grad_ready_hook([&](Variable& v) { order.push_back(v.name()); });
  Variable y = linear(ctx, relu(ctx, linear(ctx, x, w1, Variable())), w2, Variable());
  sum(ctx, y).backward(&ctx);
  EXPECT_EQ(order, (std::vector<std::string>{"w2", "w1"}));
}

TEST(Tape, NoGradGuardRecordsNothing) {
  ExecutionContext ctx;
  Variable a = param({1, 2}, {2});
  {
    NoGradGuard guard;
    Variable y = scale(ctx, a, 2.0f);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_THROW(sum(ctx, y).backward(&ctx), Error);
  }
  EXPECT_TRUE(scale(ctx, a, 2.0f).requires_grad());
}

TEST(Tape, CustomOpSuppliesItsOwnBackward) {
  ExecutionContext ctx;
  Variable x = param({1, 2, -3}, {3});
  // cube(x) = x^3 computed by hand, with backward 3 x^2 dy.
  std::vector<float> xs = x.value().to_vector(), ys;
  for (float v : xs) ys.push_back(v * v * v);
  Tensor xv = x.value();
  Variable y = make_op("cube", Tensor::from_vector(ys, {3}), {x}, [&ctx, xv](const Tensor& dy) {
    Tensor three_x2 = backend::scale(ctx, backend::mul(ctx, xv, xv), 3.0f);
    return std::vector<Tensor>{backend::mul(ctx, three_x2, dy)};
  });
  sum(ctx, y).backward(&ctx);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3, 12, 27}));
}

// double(x) = 2x, with a backward that can add its gradient into a fork's sum; `added` counts the
// times it did.
Variable doubled(ExecutionContext& ctx, const Variable& x, int* added) {
  auto backward = [&ctx](const Tensor& dy) { return std::vector<Tensor>{backend::scale(ctx, dy, 2.0f)}; };
  auto backward_adding = [&ctx, added](const Tensor& dy, Tensor& sum) {
    ++*added;
    backend::axpy(ctx, 2.0f, dy, sum);
    return std::vector<Tensor>(1);
  };
  return make_op("double", backend::scale(ctx, x.value(), 2.0f), {x}, backward, backward_adding);
}

TEST(Tape, AnOpAddsIntoItsInputsWaitingSumWhenNobodyElseSeesIt) {
  ExecutionContext ctx;
  // A residual block's shape: add_relu hands x's shortcut and the branch one shared gradient; the
  // branch's scale makes its own, so when double's turn comes x's sum is the shortcut's alone.
  // loss = sum(relu(2x + x) * r): dx = 3 r [x > 0]
  Variable x = param({1, -2, 3, 0.5f}, {4}, "x");
  Variable r(Tensor::from_vector({1, 2, 3, 4}, {4}));
  int added = 0;
  Variable branch = scale(ctx, doubled(ctx, x, &added), 1.0f);
  sum(ctx, mul(ctx, add_relu(ctx, branch, x), r)).backward(&ctx);
  EXPECT_EQ(added, 1);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3, 0, 9, 12}));
}

TEST(Tape, AnOpDoesNotAddIntoASumThatIsAlsoItsOwnGradient) {
  ExecutionContext ctx;
  // Without the scale, double's dy is the very tensor waiting as x's sum: adding into it would
  // change dy while it is read, so the plain backward runs and the engine sums.
  Variable x = param({1, -2, 3, 0.5f}, {4}, "x");
  Variable r(Tensor::from_vector({1, 2, 3, 4}, {4}));
  int added = 0;
  sum(ctx, mul(ctx, add_relu(ctx, doubled(ctx, x, &added), x), r)).backward(&ctx);
  EXPECT_EQ(added, 0);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3, 0, 9, 12}));
}

TEST(Tape, BackwardNeedsAScalar) {
  ExecutionContext ctx;
  Variable a = param({1, 2}, {2});
  try {
    scale(ctx, a, 2.0f).backward(&ctx);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scalar"), std::string::npos) << e.what();
  }
}

// A two-layer perceptron with softmax cross-entropy, differentiated by the tape, against
// central finite differences of the same function computed in double precision.
double mlp_loss_double(const std::vector<double>& w1, const std::vector<double>& w2, const std::vector<float>& x,
                       const std::vector<int64_t>& labels, int n, int in, int hidden, int out, double smoothing) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<double> h(static_cast<size_t>(hidden)), z(static_cast<size_t>(out));
    for (int j = 0; j < hidden; ++j) {
      double s = 0;
      for (int k = 0; k < in; ++k) s += w1[static_cast<size_t>(j * in + k)] * x[static_cast<size_t>(i * in + k)];
      h[static_cast<size_t>(j)] = std::max(0.0, s);
    }
    double mx = -1e300;
    for (int j = 0; j < out; ++j) {
      double s = 0;
      for (int k = 0; k < hidden; ++k) s += w2[static_cast<size_t>(j * hidden + k)] * h[static_cast<size_t>(k)];
      z[static_cast<size_t>(j)] = s;
      mx = std::max(mx, s);
    }
    double lse = 0;
    for (double v : z) lse += std::exp(v - mx);
    lse = std::log(lse) + mx;
    for (int j = 0; j < out; ++j) {
      double target = (j == labels[static_cast<size_t>(i)] ? 1 - smoothing : 0) + smoothing / out;
      total += target * (lse - z[static_cast<size_t>(j)]);
    }
  }
  return total / n;
}

TEST(Tape, MlpGradientMatchesFiniteDifferences) {
  const int n = 5, in = 4, hidden = 6, out = 3;
  const float smoothing = 0.1f;
  Generator g(3);
  auto random = [&](int count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& f : v) f = g.uniform(-1, 1);
    return v;
  };
  std::vector<float> x = random(n * in), w1v = random(hidden * in), w2v = random(out * hidden);
  std::vector<int64_t> labels = {0, 2, 1, 1, 0};
  Tensor label_tensor = Tensor::empty({n}, DType::kI64);
  std::copy(labels.begin(), labels.end(), label_tensor.data<int64_t>());

  ExecutionContext ctx;
  Variable w1 = param(w1v, {hidden, in}), w2 = param(w2v, {out, hidden});
  Variable logits = linear(ctx, relu(ctx, linear(ctx, Variable(Tensor::from_vector(x, {n, in})), w1, Variable())),
                           w2, Variable());
  Variable loss = cross_entropy_loss(ctx, logits, label_tensor, smoothing, n);
  loss.backward(&ctx);

  std::vector<double> d1(w1v.begin(), w1v.end()), d2(w2v.begin(), w2v.end());
  EXPECT_NEAR(loss.value().to_vector()[0], mlp_loss_double(d1, d2, x, labels, n, in, hidden, out, smoothing), 1e-5);
  const double eps = 1e-6;
  auto check = [&](std::vector<double>& w, const Variable& var) {
    std::vector<float> analytic = var.grad().to_vector();
    for (size_t i = 0; i < w.size(); ++i) {
      double saved = w[i];
      w[i] = saved + eps;
      double up = mlp_loss_double(d1, d2, x, labels, n, in, hidden, out, smoothing);
      w[i] = saved - eps;
      double down = mlp_loss_double(d1, d2, x, labels, n, in, hidden, out, smoothing);
      w[i] = saved;
      EXPECT_NEAR(analytic[i], (up - down) / (2 * eps), 1e-4) << "element " << i;
    }
  };
  check(d1, w1);
  check(d2, w2);
}

}  // namespace
}  // namespace tandem::autograd
