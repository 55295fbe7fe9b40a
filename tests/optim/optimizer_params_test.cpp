// The parameter list an optimizer is built over: an empty one (a frozen or unbuilt model) would
// make every step a silent no-op, and one tensor under two names would be stepped twice per step;
// both are refused at construction, as PyTorch refuses them.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/optim/optimizer.h"

namespace tandem::optim {
namespace {

using autograd::Variable;

template <typename F>
void expect_error(F&& f, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL() << "no error; expected one mentioning '" << parts.front() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

Variable param(std::vector<float> v, Shape s, std::string name) {
  return Variable(Tensor::from_vector(v, s), true, std::move(name));
}

TEST(OptimizerParams, AnEmptyParameterListIsInvalidArgument) {
  for (const char* name : {"sgd", "adamw"}) {
    expect_error([&] { make_optimizer({}, OptimizerOptions{.name = name}); }, ErrorCode::kInvalidArgument,
                 {std::string("optimizer ") + name, "the parameter list is empty"});
  }
}

TEST(OptimizerParams, OneTensorUnderTwoNamesIsInvalidArgumentNamingBoth) {
  Variable w = param({1, 2, 3, 4}, {2, 2}, "w");
  Variable b = param({0, 0}, {2}, "b");
  for (const char* name : {"sgd", "adamw"}) {
    expect_error([&] { make_optimizer({{"w", w}, {"b", b}, {"w_again", w}}, OptimizerOptions{.name = name}); },
                 ErrorCode::kInvalidArgument, {"'w' and 'w_again' are one tensor"});
  }
}

TEST(OptimizerParams, ATiedParameterGivenUnderBothNamesIsOneTensor) {
  Variable embedding = param({1, 2, 3, 4}, {2, 2}, "wte.weight");
  Variable head = param({5, 6, 7, 8}, {2, 2}, "lm_head.weight");
  head.tie_to(embedding);
  expect_error([&] { make_optimizer({{"wte.weight", embedding}, {"lm_head.weight", head}}, OptimizerOptions{}); },
               ErrorCode::kInvalidArgument, {"'wte.weight' and 'lm_head.weight' are one tensor"});
}

TEST(OptimizerParams, AnEmptyVariableIsInvalidArgumentNamingIt) {
  expect_error([&] { make_optimizer({{"w", param({1}, {1}, "w")}, {"never_built", Variable()}}, OptimizerOptions{}); },
               ErrorCode::kInvalidArgument, {"'never_built' is an empty Variable"});
}

TEST(OptimizerParams, DistinctTensorsWithEqualValuesAreFineAndEachIsSteppedOnce) {
  // Equal values, equal names of the Variables themselves: only the tensor's identity counts.
  NamedParameters params = {{"a", param({1, 1}, {2}, "p")}, {"b", param({1, 1}, {2}, "p")}};
  auto opt = make_optimizer(params, OptimizerOptions{.name = "sgd", .lr = 0.5f, .momentum = 0.0f});
  for (auto& [name, p] : params) p.set_grad(Tensor::from_vector({1, 2}, {2}));
  ExecutionContext ctx;
  opt->step(ctx);
  for (auto& [name, p] : params) EXPECT_EQ(p.value().to_vector(), (std::vector<float>{0.5f, 0.0f})) << name;
}

}  // namespace
}  // namespace tandem::optim

namespace tandem::optim {
namespace {

// PyTorch's error_if_nonfinite: a NaN gradient is an error that leaves the gradients alone, instead
// of NaN everywhere after the clip.
TEST(ClipGradNorm, ErrorIfNonfiniteRefusesANanGradient) {
  ExecutionContext ctx(Device::cpu(), 1);
  autograd::Variable w(Tensor::from_vector({1.0f, 2.0f}, {2}), true, "w");
  autograd::Variable b(Tensor::from_vector({3.0f}, {1}), true, "b");
  w.set_grad(Tensor::from_vector({std::nanf(""), 1.0f}, {2}));
  b.set_grad(Tensor::from_vector({4.0f}, {1}));
  const NamedParameters params{{"w", w}, {"b", b}};
  try {
    clip_grad_norm(ctx, params, 1.0, /*error_if_nonfinite=*/true);
    FAIL() << "a NaN gradient was clipped";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("holds NaN or inf"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.grad().to_vector(), std::vector<float>{4.0f});  // untouched
  EXPECT_NO_THROW(clip_grad_norm(ctx, params, 1.0));  // PyTorch's default: nothing is read back
}

}  // namespace
}  // namespace tandem::optim
