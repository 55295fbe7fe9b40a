// Version counters: a value written in place between an op's forward and its backward (copy_from,
// zero_, an optimizer step) would give gradients of values the forward never saw, so backward
// refuses it, naming the op and the input, as PyTorch's "modified by an inplace operation" does.
// Writes before the forward or after the backward are the normal order and pass.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

Variable param(std::vector<float> v, Shape s, std::string name) {
  return Variable(Tensor::from_vector(v, s), true, std::move(name));
}

// Runs f, which must throw a tandem Error of `code` whose message holds every one of `parts`.
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

// loss = sum(x w^T + b) over parameters w and b, x a constant.
struct LinearCase {
  Variable x{Tensor::from_vector({1, 2, -1, 0.5f}, {2, 2})};
  Variable w = param({0.5f, -1, 2, 0.25f, -3, 1}, {3, 2}, "w");
  Variable b = param({0.1f, 0.2f, 0.3f}, {3}, "b");
  Variable loss(ExecutionContext& ctx) { return sum(ctx, linear(ctx, x, w, b)); }
};

TEST(VersionCounter, CopyFromAndZeroCountWritesThroughEveryViewOfTheStorage) {
  Tensor t = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  const uint64_t v0 = t.version();
  t.copy_from(Tensor::from_vector({5, 6, 7, 8}, {2, 2}));
  EXPECT_GT(t.version(), v0);
  const uint64_t v1 = t.version();
  Tensor view = t.reshape({4});
  view.zero_();
  EXPECT_GT(t.version(), v1);  // the write went through another handle to the same memory
  EXPECT_EQ(view.version(), t.version());
  Tensor copy = t.clone();
  const uint64_t v2 = t.version();
  copy.zero_();
  EXPECT_EQ(t.version(), v2);  // a clone has memory, and a counter, of its own
  EXPECT_EQ(Tensor().version(), 0u);
}

TEST(VersionCounter, CopyFromIntoAWeightBetweenForwardAndBackwardIsRefusedNamingOpAndWeight) {
  ExecutionContext ctx(Device::cpu(), 1);
  LinearCase m;
  Variable loss = m.loss(ctx);
  m.w.value().copy_from(Tensor::from_vector({1, 1, 1, 1, 1, 1}, {3, 2}));
  // It once went on and gave the gradient for x and the new w's product, which no forward computed.
  expect_error([&] { loss.backward(&ctx); }, ErrorCode::kFailedPrecondition,
               {"backward of op 'linear'", "input 1 'w'", "modified in place after the forward pass"});
  EXPECT_FALSE(m.w.has_grad());  // nothing half-done is left behind
  EXPECT_FALSE(m.b.has_grad());
}

TEST(VersionCounter, ZeroingAnInputOfMulIsRefused) {
  ExecutionContext ctx(Device::cpu(), 1);
  Variable a = param({1, 2, 3}, {3}, "a"), c = param({4, 5, 6}, {3}, "c");
  Variable loss = sum(ctx, scale(ctx, mul(ctx, a, c), 2.0f));
  c.value().zero_();
  expect_error([&] { loss.backward(&ctx); }, ErrorCode::kFailedPrecondition,
               {"backward of op 'mul'", "input 1 'c'", "modified in place"});
}

TEST(VersionCounter, AWriteThroughAViewOfTheWeightIsRefusedToo) {
  ExecutionContext ctx(Device::cpu(), 1);
  LinearCase m;
  Variable loss = m.loss(ctx);
  Tensor flat = m.b.value().reshape({3, 1});
  flat.copy_from(Tensor::from_vector({0, 0, 0}, {3, 1}));
  expect_error([&] { loss.backward(&ctx); }, ErrorCode::kFailedPrecondition, {"input 2 'b'", "modified in place"});
}

TEST(VersionCounter, WritesBeforeTheForwardOrAfterTheBackwardAreTheNormalOrder) {
  ExecutionContext ctx(Device::cpu(), 1);
  LinearCase m;
  // loss = sum(x w^T + b): dw[o] = column sums of x = (0, 2.5), db[o] = rows = 2.
  const std::vector<float> dw_once = {0, 2.5f, 0, 2.5f, 0, 2.5f}, db_once = {2, 2, 2};
  m.w.value().copy_from(Tensor::from_vector({1, 1, 1, 1, 1, 1}, {3, 2}));
  m.loss(ctx).backward(&ctx);
  EXPECT_EQ(m.w.grad().to_vector(), dw_once);

  // As an optimizer step would, between one step's backward and the next forward.
  m.w.value().copy_from(Tensor::from_vector({2, 2, 2, 2, 2, 2}, {3, 2}));
  m.b.value().zero_();
  m.w.zero_grad();
  m.b.zero_grad();
  Variable loss = m.loss(ctx);
  EXPECT_FLOAT_EQ(loss.value().to_vector()[0], 3 * (2 * 2.5f));  // the new weights, zero bias
  loss.backward(&ctx);
  EXPECT_EQ(m.w.grad().to_vector(), dw_once);

  // Gradient accumulation: two forward and backward passes before the next write.
  m.w.zero_grad();
  m.b.zero_grad();
  for (int micro = 0; micro < 2; ++micro) m.loss(ctx).backward(&ctx);
  EXPECT_EQ(m.w.grad().to_vector(), (std::vector<float>{0, 5, 0, 5, 0, 5}));
  EXPECT_EQ(m.b.grad().to_vector(), (std::vector<float>{4, 4, 4}));
  m.w.value().zero_();
  EXPECT_NO_THROW(m.loss(ctx).backward(&ctx));
}

TEST(VersionCounter, AWriteIntoAValueTheGraphNeverReadsIsNoError) {
  ExecutionContext ctx(Device::cpu(), 1);
  Variable a = param({1, 2}, {2}, "a"), unused = param({3, 4}, {2}, "unused");
  Variable loss = sum(ctx, scale(ctx, a, 3.0f));
  unused.value().zero_();
  loss.backward(&ctx);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{3, 3}));
}

}  // namespace
}  // namespace tandem::autograd
