// Two backward passes through the same parameters at once (two threads, one module) would race on
// their gradients: a pass claims its leaves for its duration, and a second one reaching a claimed
// leaf is refused instead. The claims are given back however a pass ends.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "engine/autograd/ops.h"

namespace tandem::autograd {
namespace {

constexpr const char* kBusy = "another backward pass is running through parameter";

// loss = sum(x w^T + b), x ones (2, 2): dw = 2 everywhere, db = 2.
struct Model {
  Variable w{Tensor::from_vector({0.5f, -1, 2, 0.25f, -3, 1}, {3, 2}), true, "w"};
  Variable b{Tensor::from_vector({0.1f, 0.2f, 0.3f}, {3}), true, "b"};
  Variable loss(ExecutionContext& ctx) const {
    return sum(ctx, linear(ctx, Variable(Tensor::from_vector({1, 1, 1, 1}, {2, 2})), w, b));
  }
};

bool claimed(const Variable& v) { return v.data()->in_backward.load(); }

TEST(ConcurrentBackward, AParameterClaimedByAnotherPassIsRefusedAndItsClaimLeftAlone) {
  ExecutionContext ctx(Device::cpu(), 1);
  Model m;
  Variable loss = m.loss(ctx);
  m.b.data()->in_backward = true;  // another thread is in the middle of its backward through b
  try {
    loss.backward(&ctx);
    FAIL() << "a second backward pass ran through a claimed parameter";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::string(kBusy) + " 'b'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(claimed(m.b));   // still the other pass's
  EXPECT_FALSE(claimed(m.w));  // whatever this pass claimed before it met b is given back
  EXPECT_FALSE(m.w.has_grad());
  EXPECT_FALSE(m.b.has_grad());

  // The other pass ends: the refused graph was left whole, and its backward now runs.
  m.b.data()->in_backward = false;
  loss.backward(&ctx);
  EXPECT_EQ(m.w.grad().to_vector(), std::vector<float>(6, 2.0f));
  EXPECT_EQ(m.b.grad().to_vector(), std::vector<float>(3, 2.0f));
  EXPECT_FALSE(claimed(m.w));
  EXPECT_FALSE(claimed(m.b));
}

TEST(ConcurrentBackward, ABackwardThatThrowsGivesItsClaimsBack) {
  ExecutionContext ctx(Device::cpu(), 1);
  Model m;
  Variable loss = m.loss(ctx);
  m.w.value().zero_();  // the version check throws from inside the pass, after the claims were taken
  EXPECT_THROW(loss.backward(&ctx), Error);
  EXPECT_FALSE(claimed(m.w));
  EXPECT_FALSE(claimed(m.b));
  m.loss(ctx).backward(&ctx);
  EXPECT_EQ(m.b.grad().to_vector(), std::vector<float>(3, 2.0f));

  // And a custom op's failing backward, which throws from the op itself.
  Variable y = make_op("always_fails", m.w.value().clone(), {m.w},
                       [](const Tensor&) -> std::vector<Tensor> { throw_error(ErrorCode::kInternal, "boom"); });
  EXPECT_THROW(sum(ctx, y).backward(&ctx), Error);
  EXPECT_FALSE(claimed(m.w));
}

TEST(ConcurrentBackward, TwoThreadsThroughOneModelEachSucceedOrAreRefusedAndNoGradientIsLost) {
  Model m;
  constexpr int kPasses = 200;
  std::atomic<int> done{0}, refused{0}, other{0};
  std::atomic<bool> go{false};
  auto run = [&] {
    ExecutionContext ctx(Device::cpu(), 1);
    while (!go.load()) std::this_thread::yield();
    for (int i = 0; i < kPasses; ++i) {
      try {
        m.loss(ctx).backward(&ctx);
        ++done;
      } catch (const Error& e) {
        const bool busy = e.code() == ErrorCode::kFailedPrecondition && std::string(e.what()).find(kBusy) != std::string::npos;
        ++(busy ? refused : other);
      }
    }
  };
  std::thread a(run), b(run);
  go = true;
  a.join();
  b.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(done.load() + refused.load(), 2 * kPasses);
  ASSERT_GT(done.load(), 0);
  // Each pass that ran added its gradient exactly once: a race would lose or tear some.
  const float want = 2.0f * static_cast<float>(done.load());
  EXPECT_EQ(m.w.grad().to_vector(), std::vector<float>(6, want));
  EXPECT_EQ(m.b.grad().to_vector(), std::vector<float>(3, want));
  EXPECT_FALSE(claimed(m.w));
  EXPECT_FALSE(claimed(m.b));
}

}  // namespace
}  // namespace tandem::autograd
