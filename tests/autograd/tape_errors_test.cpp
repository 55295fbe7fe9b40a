// The tape's faults are errors that say what went wrong: a second backward through a freed graph,
// an empty Variable given to an op, a custom op whose backward returns the wrong gradients.
#include <gtest/gtest.h>

#include <string>

#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

Variable param(std::vector<float> v, Shape s, std::string name = "p") {
  return Variable(Tensor::from_vector(v, s), true, std::move(name));
}

// Runs f, which must throw a tandem Error of `code` whose message holds `needle`.
template <typename F>
void expect_error(F&& f, ErrorCode code, const std::string& needle) {
  try {
    f();
    FAIL() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TapeErrors, ASecondBackwardThroughTheSameGraphIsAnErrorAndLeavesGradientsAlone) {
  ExecutionContext ctx;
  Variable a = param({1, 2}, {2});
  Variable loss = sum(ctx, mul(ctx, a, a));  // d/da = 2a
  loss.backward(&ctx);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{2, 4}));
  // It once treated the freed loss as a leaf: loss.grad became 1 and a's gradient stayed put.
  expect_error([&] { loss.backward(&ctx); }, ErrorCode::kFailedPrecondition, "already ran and freed");
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{2, 4}));
}

TEST(TapeErrors, ANewGraphBuiltOnAFreedIntermediateIsAnError) {
  ExecutionContext ctx;
  Variable a = param({1, 2}, {2});
  Variable h = scale(ctx, a, 3.0f);
  sum(ctx, h).backward(&ctx);
  Variable again = sum(ctx, mul(ctx, h, h));
  expect_error([&] { again.backward(&ctx); }, ErrorCode::kFailedPrecondition, "an input of mul");
}

TEST(TapeErrors, AFreshForwardAfterBackwardIsFine) {
  ExecutionContext ctx;
  Variable a = param({1, 2}, {2});
  for (int i = 0; i < 2; ++i) sum(ctx, scale(ctx, a, 2.0f)).backward(&ctx);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{4, 4}));
}

TEST(TapeErrors, AnEmptyVariableGivenToAnOpIsAnError) {
  ExecutionContext ctx;
  Variable a = param({1, 2}, {2});
  Variable never_assigned;
  expect_error([&] { add(ctx, a, never_assigned); }, ErrorCode::kInvalidArgument, "empty Variable");
  expect_error([&] { linear(ctx, never_assigned, a, Variable()); }, ErrorCode::kInvalidArgument, "empty Variable");
  expect_error([&] { (void)never_assigned.shape(); }, ErrorCode::kInvalidArgument, "never given a value");
  expect_error([&] { make_op("mine", Tensor::zeros({1}), {never_assigned}, nullptr); }, ErrorCode::kInvalidArgument,
               "op 'mine': input 0");
}

TEST(TapeErrors, ACustomOpReturningTooFewGradientsIsInvalidArgumentNamingIt) {
  ExecutionContext ctx;
  Variable a = param({1, 2}, {2}), b = param({3, 4}, {2});
  Variable y = make_op("my_pair_op", backend::add(ctx, a.value(), b.value()), {a, b},
                       [](const Tensor& dy) { return std::vector<Tensor>{dy}; });
  expect_error([&] { sum(ctx, y).backward(&ctx); }, ErrorCode::kInvalidArgument, "'my_pair_op' returned 1 gradients");
}

TEST(TapeErrors, ACustomOpReturningAGradientOfTheWrongShapeIsInvalidArgumentNamingIt) {
  ExecutionContext ctx;
  Variable a = param({1, 2}, {2});
  Variable y = make_op("my_bad_shape", a.value(), {a},
                       [](const Tensor&) { return std::vector<Tensor>{Tensor::zeros({3})}; });
  expect_error([&] { sum(ctx, y).backward(&ctx); }, ErrorCode::kInvalidArgument, "'my_bad_shape' returned a gradient");
}

}  // namespace
}  // namespace tandem::autograd
