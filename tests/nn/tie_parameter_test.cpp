// Weight tying: a parameter tied to another variable is that variable for every handle to it, so a
// layer that kept its own copy of the handle (Linear's weight_) computes with the shared tensor and
// sends its gradient there, and the module lists the shared tensor once.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/nn/layers.h"

namespace tandem::nn {
namespace {

// A table of (3, 2) and a Linear(2, 3) head whose weight is tied to it, as GPT's lm_head and wte.
class TiedHead : public Module {
 public:
  TiedHead() {
    table_ = &register_parameter("table", Tensor::zeros({3, 2}));
    head_ = register_module("head", std::make_shared<Linear>(2, 3));
    head_->tie_parameter("weight", *table_);
  }
  Variable forward(ExecutionContext& ctx, const Variable& x) override { return head_->forward(ctx, x); }
  Variable& table() { return *table_; }
  Linear& head() { return *head_; }

 private:
  Variable* table_ = nullptr;
  std::shared_ptr<Linear> head_;
};

Variable parameter_named(const Module& m, const std::string& name) {
  for (auto& [n, p] : m.named_parameters()) {
    if (n == name) return p;
  }
  ADD_FAILURE() << "no parameter " << name;
  return {};
}

// y = x t^T + b, in double.
std::vector<float> linear_ref(const std::vector<float>& x, const std::vector<float>& t, const std::vector<float>& b) {
  std::vector<float> y;
  for (size_t i = 0; i < 2; ++i) {
    for (size_t o = 0; o < 3; ++o) {
      double s = b[o];
      for (size_t k = 0; k < 2; ++k) s += static_cast<double>(x[i * 2 + k]) * t[o * 2 + k];
      y.push_back(static_cast<float>(s));
    }
  }
  return y;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

TEST(TieParameter, ALinearTiedToAnotherVariableComputesWithItAndSendsItTheGradient) {
  ExecutionContext ctx(Device::cpu(), 1);
  TiedHead model;
  const std::vector<float> t = {0.5f, -1.0f, 2.0f, 0.25f, -3.0f, 1.0f};
  const std::vector<float> b = {0.125f, -0.5f, 1.0f};
  model.table().value().copy_from(Tensor::from_vector(t, {3, 2}));
  Variable bias = parameter_named(model.head(), "bias");
  bias.value().copy_from(Tensor::from_vector(b, {3}));

  // It once went on using the Linear's own random weight while the module listed the table.
  const std::vector<float> x = {1.0f, 2.0f, -1.0f, 0.5f};
  Variable y = model.forward(ctx, Variable(Tensor::from_vector(x, {2, 2})));
  ASSERT_EQ(y.shape(), Shape({2, 3}));
  expect_near(y.value().to_vector(), linear_ref(x, t, b));

  // loss = sum(y * r): d/dt[o][k] = sum_i r[i][o] x[i][k], d/db[o] = sum_i r[i][o].
  const std::vector<float> r = {1.0f, -2.0f, 0.5f, 3.0f, 1.0f, -1.0f};
  autograd::sum(ctx, autograd::mul(ctx, y, Variable(Tensor::from_vector(r, {2, 3})))).backward(&ctx);
  ASSERT_TRUE(model.table().has_grad()) << "the gradient went to the Linear's former weight";
  std::vector<float> want_dt(6), want_db(3);
  for (size_t o = 0; o < 3; ++o) {
    for (size_t k = 0; k < 2; ++k) want_dt[o * 2 + k] = r[o] * x[k] + r[3 + o] * x[2 + k];
    want_db[o] = r[o] + r[3 + o];
  }
  expect_near(model.table().grad().to_vector(), want_dt);
  expect_near(bias.grad().to_vector(), want_db);
  EXPECT_TRUE(parameter_named(model.head(), "weight").same_as(model.table()));

  // A later in-place write to the table (an optimizer step, a checkpoint load) reaches the forward.
  const std::vector<float> t2 = {1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f};
  model.table().value().copy_from(Tensor::from_vector(t2, {3, 2}));
  expect_near(model.forward(ctx, Variable(Tensor::from_vector(x, {2, 2}))).value().to_vector(), linear_ref(x, t2, b));
}

TEST(TieParameter, TheSharedTensorIsListedOnceButKeepsBothNamesInTheStateDict) {
  TiedHead model;
  std::vector<std::string> names;
  for (auto& [name, p] : model.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"table", "head.bias"}));
  auto state = model.state_dict();
  ASSERT_EQ(state.count("head.weight"), 1u);
  EXPECT_TRUE(state["head.weight"].shares_storage_with(state["table"]));
}

TEST(TieParameter, AVariableOfAnotherShapeOrAMissingNameIsRefused) {
  TiedHead model;
  Variable wrong(Tensor::zeros({2, 3}), true, "wrong");
  try {
    model.head().tie_parameter("weight", wrong);
    FAIL() << "a (2, 3) variable was tied to a (3, 2) weight";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tie_parameter: 'weight'"), std::string::npos) << e.what();
  }
  try {
    model.head().tie_parameter("scale", model.table());
    FAIL() << "an unknown parameter name was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("no parameter 'scale'"), std::string::npos) << e.what();
  }
}

TEST(TieTo, EveryEarlierCopyOfTheHandleFollowsTheTie) {
  ExecutionContext ctx(Device::cpu(), 1);
  Variable own(Tensor::from_vector({1, 2}, {2}), true, "own");
  Variable kept = own;  // what a layer holds
  Variable target(Tensor::from_vector({5, 7}, {2}), true, "target");
  own.tie_to(target);
  EXPECT_TRUE(kept.same_as(target));
  EXPECT_TRUE(kept.value().shares_storage_with(target.value()));
  EXPECT_EQ(kept.name(), "target");
  EXPECT_EQ(kept.data(), target.data());

  // Ties chain: a variable tied to `own` reaches `target` too.
  Variable third(Tensor::zeros({2}), true, "third");
  third.tie_to(kept);
  EXPECT_TRUE(third.same_as(target));

  autograd::sum(ctx, autograd::mul(ctx, kept, third)).backward(&ctx);  // d/dt sum(t * t) = 2t
  EXPECT_EQ(target.grad().to_vector(), (std::vector<float>{10, 14}));
  EXPECT_TRUE(own.has_grad());
  own.tie_to(target);  // tied already: nothing changes
  EXPECT_TRUE(own.same_as(target));
}

TEST(TieTo, OnlyLeavesCanBeTied) {
  ExecutionContext ctx(Device::cpu(), 1);
  Variable leaf(Tensor::from_vector({1, 2}, {2}), true, "leaf");
  Variable result = autograd::scale(ctx, leaf, 2.0f);
  Variable other(Tensor::zeros({2}), true, "other");
  for (auto* f : {+[](Variable& a, Variable& b) { a.tie_to(b); }, +[](Variable& a, Variable& b) { b.tie_to(a); }}) {
    try {
      f(result, other);
      FAIL() << "a result of an op was tied";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("only leaves"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(other.same_as(result));
}

}  // namespace
}  // namespace tandem::nn
