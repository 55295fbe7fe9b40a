// An optimizer step writes the weights in place: a graph recorded before it would backward through
// values that are gone, so that backward is refused (PyTorch's "modified by an inplace operation"),
// while the usual order (zero_grad, forward, backward, step), gradient accumulation included, runs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/optim/optimizer.h"

namespace tandem::optim {
namespace {

using autograd::Variable;

// loss = sum(x w^T + b), x (2, 2) a constant: dw[o] = column sums of x = (0, 2.5), db[o] = 2.
struct Model {
  Variable x{Tensor::from_vector({1, 2, -1, 0.5f}, {2, 2})};
  NamedParameters params{{"w", Variable(Tensor::from_vector({0.5f, -1, 2, 0.25f, -3, 1}, {3, 2}), true, "w")},
                         {"b", Variable(Tensor::from_vector({0.1f, 0.2f, 0.3f}, {3}), true, "b")}};
  Variable& w() { return params[0].second; }
  Variable& b() { return params[1].second; }
  Variable loss(ExecutionContext& ctx) { return autograd::sum(ctx, autograd::linear(ctx, x, w(), b())); }
};

void expect_stale(Variable& loss, ExecutionContext& ctx, const std::string& input) {
  try {
    loss.backward(&ctx);
    FAIL() << "backward ran through weights an optimizer step had changed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
    for (const std::string& part : {std::string("backward of op 'linear'"), input,
                                    std::string("modified in place after the forward pass")}) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
}

TEST(StepVersion, AStepBetweenForwardAndBackwardIsRefusedAndLeavesTheGradientsAlone) {
  for (const char* name : {"sgd", "adamw"}) {
    ExecutionContext ctx(Device::cpu(), 1);
    Model m;
    auto opt = make_optimizer(m.params, OptimizerOptions{.name = name, .lr = 0.1f});
    m.loss(ctx).backward(&ctx);
    const std::vector<float> dw = m.w().grad().to_vector();
    Variable loss = m.loss(ctx);
    opt->step(ctx);
    expect_stale(loss, ctx, "input 1 'w'");
    EXPECT_EQ(m.w().grad().to_vector(), dw) << name;  // the refused pass added nothing
  }
}

TEST(StepVersion, APartialUpdateCountsForTheParametersItUpdates) {
  ExecutionContext ctx(Device::cpu(), 1);
  Model m;
  auto opt = make_optimizer(m.params, OptimizerOptions{.name = "sgd", .lr = 0.1f});
  m.loss(ctx).backward(&ctx);
  const uint64_t w_version = m.w().value().version(), b_version = m.b().value().version();
  Variable loss = m.loss(ctx);
  opt->update_params(ctx, {1});  // a gradient bucket holding b alone completed
  EXPECT_EQ(m.w().value().version(), w_version);
  EXPECT_GT(m.b().value().version(), b_version);
  expect_stale(loss, ctx, "input 2 'b'");
  opt->finish_step();
}

TEST(StepVersion, EveryWeightDecayGroupIsCounted) {
  ExecutionContext ctx(Device::cpu(), 1);
  Model m;
  // Rank-1 b goes to the no-decay group, w to the decay group.
  auto opt = make_optimizer(m.params, OptimizerOptions{.name = "sgd", .lr = 0.1f, .weight_decay = 0.01f,
                                                        .exclude_norm_and_bias_from_weight_decay = true});
  m.loss(ctx).backward(&ctx);
  const uint64_t w_version = m.w().value().version(), b_version = m.b().value().version();
  opt->step(ctx);
  EXPECT_GT(m.w().value().version(), w_version);
  EXPECT_GT(m.b().value().version(), b_version);
}

TEST(StepVersion, TheUsualOrderAndGradientAccumulationRunWithoutARefusal) {
  ExecutionContext ctx(Device::cpu(), 1);
  Model m;
  const std::vector<float> w0 = m.w().value().to_vector(), b0 = m.b().value().to_vector();
  const float lr = 0.125f;
  auto opt = make_optimizer(m.params, OptimizerOptions{.name = "sgd", .lr = lr, .momentum = 0.0f});
  int passes = 0;
  for (int step = 0; step < 3; ++step) {  // zero_grad, forward, backward, step
    opt->zero_grad();
    ASSERT_NO_THROW(m.loss(ctx).backward(&ctx)) << "step " << step;
    ++passes;
    opt->step(ctx);
  }
  for (int step = 0; step < 2; ++step) {  // two micro-batches per step
    opt->zero_grad();
    for (int micro = 0; micro < 2; ++micro) {
      ASSERT_NO_THROW(m.loss(ctx).backward(&ctx)) << "step " << step << " micro-batch " << micro;
      ++passes;
    }
    opt->step(ctx);
  }
  // The gradient is the same every pass, and every pass counted once.
  const std::vector<float> dw = {0, 2.5f, 0, 2.5f, 0, 2.5f};
  std::vector<float> w = m.w().value().to_vector(), b = m.b().value().to_vector();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], w0[i] - lr * passes * dw[i], 1e-5) << i;
  for (size_t i = 0; i < b.size(); ++i) EXPECT_NEAR(b[i], b0[i] - lr * passes * 2.0f, 1e-5) << i;
  EXPECT_EQ(opt->steps_taken(), 5);
}

}  // namespace
}  // namespace tandem::optim
