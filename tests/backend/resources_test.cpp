// The steady state: oneDNN plans are made once per shape and reused, a repeated training
// step makes no new system allocation after warm-up, and each call keeps to the context's
// thread budget (omp_get_max_threads of the calling thread is the context's num_threads).
#include <gtest/gtest.h>
#include <omp.h>

#include <thread>

#include "backend_test_util.h"
#include "engine/backend/cpu/cpu_backend.h"

namespace tandem::backend::testing {
namespace {

// One small training step through most ops: conv, BN+ReLU, max pool, global pool, linear, loss.
void training_step(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& fc, const Tensor& labels,
                   Tensor& rm, Tensor& rv) {
  Conv2dParams cp;
  cp.padding = {1, 1};
  BatchNormParams bp;
  bp.fuse_relu = true;
  Pool2dParams pp;
  Tensor gamma = Tensor::empty({8}), beta = Tensor::empty({8});
  fill(ctx, 1.0f, gamma);
  fill(ctx, 0.0f, beta);
  Tensor y = conv2d_forward(ctx, cp, x, w);
  BatchNormForward bn = batchnorm_forward_training(ctx, bp, y, gamma, beta, rm, rv);
  MaxPoolForward mp = max_pool2d_forward(ctx, pp, bn.y);
  Tensor g = global_avg_pool_forward(ctx, mp.y).to_format(MemoryFormat::kContiguous).reshape({x.dim(0), 8});
  Tensor logits = linear_forward(ctx, g, fc);
  SoftmaxCrossEntropyForward loss = softmax_cross_entropy_forward(ctx, logits, labels, 0.1f);
  Tensor dloss = Tensor::empty({x.dim(0)});
  fill(ctx, 1.0f, dloss);
  Tensor dlogits = softmax_cross_entropy_backward(ctx, loss.probs, labels, 0.1f, dloss);
  Tensor dg = linear_backward_data(ctx, dlogits, fc);
  LinearWeightGrads dfc = linear_backward_weights(ctx, g, dlogits, false);
  Tensor dgp = global_avg_pool_backward(ctx, dg.reshape({x.dim(0), 8, 1, 1}).to_format(x.format()), mp.y.shape());
  Tensor dmp = max_pool2d_backward(ctx, pp, bn.y, dgp, mp.workspace);
  BatchNormGrads dbn = batchnorm_backward(ctx, bp, y, bn.y, dmp, gamma, bn.saved);
  Tensor dx = conv2d_backward_data(ctx, cp, dbn.dx, w, x.shape());
  ConvWeightGrads dw = conv2d_backward_weights(ctx, cp, x, dbn.dx, w.shape(), false);
  Tensor total = sum(ctx, dw.dw);
}

class SteadyStateTest : public ::testing::TestWithParam<MemoryFormat> {};

TEST_P(SteadyStateTest, RepeatedStepsMakeNoPlansAndNoSystemAllocations) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  Tensor x = to_tensor(random_vec(4 * 3 * 10 * 10, 1), {4, 3, 10, 10}, GetParam());
  Tensor w = to_tensor(random_vec(8 * 3 * 3 * 3, 2), {8, 3, 3, 3});
  Tensor fc = to_tensor(random_vec(5 * 8, 3), {5, 8});
  Tensor labels = Tensor::empty({4}, DType::kI64);
  for (int i = 0; i < 4; ++i) labels.data<int64_t>()[i] = i;
  Tensor rm = Tensor::zeros({8}), rv = Tensor::zeros({8});
  for (int i = 0; i < 2; ++i) training_step(ctx, x, w, fc, labels, rm, rv);  // warm-up: plans and blocks
  int64_t plans = cpu::primitives_created();
  int64_t system = allocator_for(Device::cpu()).stats().system_allocations;
  for (int i = 0; i < 5; ++i) training_step(ctx, x, w, fc, labels, rm, rv);
  EXPECT_EQ(cpu::primitives_created(), plans);
  EXPECT_EQ(allocator_for(Device::cpu()).stats().system_allocations, system);
}

INSTANTIATE_TEST_SUITE_P(Formats, SteadyStateTest,
                         ::testing::Values(MemoryFormat::kContiguous, MemoryFormat::kChannelsLast));

TEST(PlanCache, SameConvolutionTwiceMakesOnePlan) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  Conv2dParams p;
  p.stride = {2, 2};
  Tensor x = to_tensor(random_vec(2 * 5 * 9 * 9, 1), {2, 5, 9, 9});
  Tensor w = to_tensor(random_vec(7 * 5 * 3 * 3, 2), {7, 5, 3, 3});
  int64_t before = cpu::primitives_created();
  Tensor y1 = conv2d_forward(ctx, p, x, w);
  int64_t after_first = cpu::primitives_created();
  EXPECT_EQ(after_first, before + 1);
  Tensor y2 = conv2d_forward(ctx, p, x, w);
  EXPECT_EQ(cpu::primitives_created(), after_first);
  EXPECT_EQ(y1.to_vector(), y2.to_vector());
  // Another shape, another format or another thread budget is another plan.
  conv2d_forward(ctx, p, x.to_format(MemoryFormat::kChannelsLast), w);
  EXPECT_EQ(cpu::primitives_created(), after_first + 1);
  ExecutionContext one(Device::cpu(), 1, 1);
  conv2d_forward(one, p, x, w);
  EXPECT_EQ(cpu::primitives_created(), after_first + 2);
}

int threads_in_region() {
  int n = 0;
#pragma omp parallel
  {
#pragma omp single
    n = omp_get_num_threads();
  }
  return n;
}

TEST(ThreadBudget, EachCallUsesTheContextsThreadCount) {
  Tensor x = to_tensor(random_vec(2 * 3 * 6 * 6, 1), {2, 3, 6, 6});
  Tensor w = to_tensor(random_vec(4 * 3 * 3 * 3, 2), {4, 3, 3, 3});
  for (int budget : {1, 2, 3}) {
    ExecutionContext ctx(Device::cpu(), budget, 1);
    conv2d_forward(ctx, {}, x, w);
    EXPECT_EQ(omp_get_max_threads(), budget);
    EXPECT_EQ(threads_in_region(), budget);
    relu_forward(ctx, x);
    EXPECT_EQ(omp_get_max_threads(), budget);
  }
}

TEST(ThreadBudget, ReplicaThreadsKeepTheirOwnBudgets) {
  // Two replica threads with different budgets: the setting is per thread, so neither leaks.
  Tensor x = to_tensor(random_vec(2 * 3 * 6 * 6, 1), {2, 3, 6, 6});
  Tensor w = to_tensor(random_vec(4 * 3 * 3 * 3, 2), {4, 3, 3, 3});
  int seen[2] = {0, 0};
  auto replica = [&](int index, int budget) {
    ExecutionContext ctx(Device::cpu(), budget, 1);
    for (int i = 0; i < 3; ++i) conv2d_forward(ctx, {}, x, w);
    sum(ctx, x);
    seen[index] = omp_get_max_threads();
  };
  std::thread a(replica, 0, 1), b(replica, 1, 2);
  a.join();
  b.join();
  EXPECT_EQ(seen[0], 1);
  EXPECT_EQ(seen[1], 2);
}

}  // namespace
}  // namespace tandem::backend::testing
