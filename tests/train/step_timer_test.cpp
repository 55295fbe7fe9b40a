// StepTimer on the CPU, where timer events carry host times: phases are the times between the
// marks, the exposed all-reduce is the time spent inside bucket waits, and steps are read `lag`
// steps late (at once with lag 0), every step exactly once.
#include "engine/train/step_timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace tandem::train {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

void one_step(StepTimer& t, int forward_ms, int backward_ms, int wait_ms, int update_ms) {
  t.start();
  sleep_ms(forward_ms);
  t.forward_done();
  sleep_ms(backward_ms);
  t.backward_done();
  t.wait_begins();
  sleep_ms(wait_ms);
  t.wait_ends();
  sleep_ms(update_ms);
}

TEST(StepTimer, PhasesAreTheTimesBetweenTheMarks) {
  ExecutionContext ctx;
  StepTimer timer(ctx, 0);
  one_step(timer, 30, 20, 15, 10);
  auto steps = timer.step_done(7);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].first, 7);
  const DevicePhases& p = steps[0].second;
  EXPECT_GE(p.forward, 0.029);
  EXPECT_GE(p.backward, 0.019);
  EXPECT_GE(p.all_reduce, 0.014);
  EXPECT_GE(p.optimizer, 0.009);
  EXPECT_LT(p.all_reduce, p.forward);  // the wait alone, not the update after it
  EXPECT_LT(p.optimizer, p.backward);
}

TEST(StepTimer, StepsAreReadLagStepsLateAndDrainedOnce) {
  ExecutionContext ctx;
  StepTimer timer(ctx, 2);
  std::vector<int64_t> read;
  for (int64_t step = 1; step <= 5; ++step) {
    one_step(timer, 1, 1, 1, 1);
    for (auto& [s, p] : timer.step_done(step)) read.push_back(s);
    EXPECT_EQ(static_cast<int64_t>(read.size()), std::max<int64_t>(0, step - 2)) << step;
  }
  for (auto& [s, p] : timer.drain()) read.push_back(s);
  EXPECT_EQ(read, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(timer.drain().empty());
}

TEST(StepTimer, AStepWithSeveralWaitsSumsThem) {
  ExecutionContext ctx;
  StepTimer timer(ctx, 0);
  timer.start();
  timer.forward_done();
  timer.backward_done();
  for (int i = 0; i < 3; ++i) {
    timer.wait_begins();
    sleep_ms(10);
    timer.wait_ends();
  }
  auto steps = timer.step_done(1);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_GE(steps[0].second.all_reduce, 0.029);
}

}  // namespace
}  // namespace tandem::train
