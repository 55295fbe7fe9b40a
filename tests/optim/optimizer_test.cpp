// Optimizers against PyTorch's update rules written out in double precision, schedules at
// chosen steps, weight-decay exclusion, clipping and state round trips.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"

namespace tandem::optim {
namespace {

using autograd::Variable;

NamedParameters two_params() {
  return {{"w", Variable(Tensor::from_vector({1.0f, -2.0f, 0.5f, 3.0f}, {2, 2}), true, "w")},
          {"b", Variable(Tensor::from_vector({0.25f, -0.75f}, {2}), true, "b")}};
}

// Gradient of step s for element i, the same on both sides.
float grad_at(int s, size_t i) { return std::sin(0.7f * static_cast<float>(s) + static_cast<float>(i)); }

void set_grads(NamedParameters& params, int s) {
  size_t base = 0;
  for (auto& [name, p] : params) {
    std::vector<float> g(static_cast<size_t>(p.value().numel()));
    for (size_t i = 0; i < g.size(); ++i) g[i] = grad_at(s, base + i);
    p.set_grad(Tensor::from_vector(g, p.shape()));
    base += g.size();
  }
}

std::vector<double> flat_values(const NamedParameters& params) {
  std::vector<double> out;
  for (auto& [name, p] : params) {
    for (float v : p.value().to_vector()) out.push_back(v);
  }
  return out;
}

TEST(Sgd, NesterovMomentumWithDecayExcludingBiasMatchesPyTorchRule) {
  NamedParameters params = two_params();
  OptimizerOptions o{.name = "sgd", .lr = 0.1f, .weight_decay = 0.01f, .exclude_norm_and_bias_from_weight_decay = true,
                     .momentum = 0.9f, .nesterov = true};
  auto opt = make_optimizer(params, o);
  std::vector<double> w = flat_values(params), buf(w.size(), 0.0);
  ExecutionContext ctx;
  for (int s = 0; s < 4; ++s) {
    set_grads(params, s);
    opt->step(ctx);
    for (size_t i = 0; i < w.size(); ++i) {
      double decay = i < 4 ? 0.01 : 0.0;  // the rank-1 bias is excluded
      double d = grad_at(s, i) + decay * w[i];
      buf[i] = s == 0 ? d : 0.9 * buf[i] + d;
      w[i] -= 0.1 * (d + 0.9 * buf[i]);
    }
  }
  std::vector<double> got = flat_values(params);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(got[i], w[i], 1e-5) << i;
  EXPECT_EQ(opt->steps_taken(), 4);
  EXPECT_EQ(opt->state_dict().count("w.momentum_buffer"), 1u);
}

TEST(AdamW, MatchesPyTorchRule) {
  NamedParameters params = two_params();
  OptimizerOptions o{.name = "adamw", .lr = 0.01f, .weight_decay = 0.1f};
  auto opt = make_optimizer(params, o);
  std::vector<double> w = flat_values(params), m(w.size(), 0.0), v(w.size(), 0.0);
  ExecutionContext ctx;
  for (int s = 0; s < 5; ++s) {
    set_grads(params, s);
    opt->step(ctx);
    for (size_t i = 0; i < w.size(); ++i) {
      double g = grad_at(s, i);
      w[i] *= 1 - 0.01 * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      double m_hat = m[i] / (1 - std::pow(0.9, s + 1)), v_hat = v[i] / (1 - std::pow(0.999, s + 1));
      w[i] -= 0.01 * m_hat / (std::sqrt(v_hat) + 1e-8);
    }
  }
  std::vector<double> got = flat_values(params);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(got[i], w[i], 1e-5) << i;
}

TEST(Optimizer, StateRoundTripContinuesIdentically) {
  ExecutionContext ctx;
  NamedParameters a = two_params(), b = two_params();
  OptimizerOptions o{.name = "sgd", .lr = 0.05f, .momentum = 0.9f};
  auto opt_a = make_optimizer(a, o);
  for (int s = 0; s < 3; ++s) {
    set_grads(a, s);
    opt_a->step(ctx);
  }
  // b takes a's weights and optimizer state, then both take the same further steps.
  for (size_t i = 0; i < a.size(); ++i) b[i].second.value().copy_from(a[i].second.value());
  auto opt_b = make_optimizer(b, o);
  std::map<std::string, Tensor> state;
  for (auto& [k, t] : opt_a->state_dict()) state[k] = t.clone();
  opt_b->load_state_dict(state, opt_a->steps_taken());
  for (int s = 3; s < 6; ++s) {
    set_grads(a, s);
    set_grads(b, s);
    opt_a->step(ctx);
    opt_b->step(ctx);
  }
  EXPECT_EQ(flat_values(a), flat_values(b));
}

TEST(Optimizer, AStepInPartsEqualsOneStep) {
  // What a replica does with gradient buckets: update the parameters part by part (in reverse
  // order, as buckets complete), then finish the step. AdamW's bias correction counts steps, so
  // a step counted too early or twice would show.
  for (const char* name : {"sgd", "adamw"}) {
    ExecutionContext ctx;
    NamedParameters whole = two_params(), parts = two_params();
    OptimizerOptions o{.name = name, .lr = 0.05f, .weight_decay = 0.01f, .momentum = 0.9f};
    auto opt_whole = make_optimizer(whole, o), opt_parts = make_optimizer(parts, o);
    for (int s = 0; s < 4; ++s) {
      set_grads(whole, s);
      set_grads(parts, s);
      opt_whole->step(ctx);
      opt_parts->update_params(ctx, {1});
      opt_parts->update_params(ctx, {0});
      opt_parts->finish_step();
    }
    EXPECT_EQ(flat_values(whole), flat_values(parts)) << name;
    EXPECT_EQ(opt_parts->steps_taken(), 4) << name;
  }
  ExecutionContext ctx;
  NamedParameters params = two_params();
  auto opt = make_optimizer(params, OptimizerOptions{.name = "sgd"});
  set_grads(params, 0);
  EXPECT_THROW(opt->update_params(ctx, {2}), Error);
}

TEST(Optimizer, MissingGradientNamesTheParameter) {
  NamedParameters params = two_params();
  auto opt = make_optimizer(params, {.name = "sgd", .momentum = 0.0f});
  params[0].second.set_grad(Tensor::zeros({2, 2}));
  ExecutionContext ctx;
  try {
    opt->step(ctx);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_optimizer(params, {.name = "adam"}), Error);
}

TEST(ClipGradNorm, ScalesToMaxNorm) {
  NamedParameters params = two_params();
  params[0].second.set_grad(Tensor::from_vector({3, 0, 0, 0}, {2, 2}));
  params[1].second.set_grad(Tensor::from_vector({0, 4}, {2}));
  ExecutionContext ctx;
  auto norm = [&](double max_norm) { return std::sqrt(clip_grad_norm(ctx, params, max_norm).to_vector()[0]); };
  EXPECT_NEAR(norm(1.0), 5.0, 1e-6);
  EXPECT_NEAR(params[0].second.grad().to_vector()[0], 0.6, 1e-5);
  EXPECT_NEAR(params[1].second.grad().to_vector()[1], 0.8, 1e-5);
  EXPECT_NEAR(norm(10.0), 1.0, 1e-5);  // under the limit: unchanged
  EXPECT_NEAR(params[1].second.grad().to_vector()[1], 0.8, 1e-5);
  EXPECT_THROW(clip_grad_norm(ctx, params, 0.0), Error);
}

TEST(ClipGradNorm, AGradientTwoParametersShareIsScaledOnce) {
  // autograd's add hands one dy to both inputs: two parameters then hold the same tensor.
  NamedParameters params = {{"a", Variable(Tensor::zeros({2}), true, "a")}, {"b", Variable(Tensor::zeros({2}), true, "b")}};
  Tensor shared = Tensor::from_vector({3, 4}, {2});
  params[0].second.set_grad(shared);
  params[1].second.set_grad(shared);
  ExecutionContext ctx;
  clip_grad_norm(ctx, params, 1.0);  // the norm counts both: sqrt(2) * 5
  const float factor = static_cast<float>(1.0 / (std::sqrt(50.0) + 1e-6));
  EXPECT_FLOAT_EQ(shared.to_vector()[0], 3 * factor);  // once, not factor squared
  EXPECT_FLOAT_EQ(shared.to_vector()[1], 4 * factor);
}

TEST(LrSchedule, ShapesAtChosenSteps) {
  LrSchedule cosine({.name = "cosine", .warmup_steps = 10}, 1.0f, 256, 110);
  EXPECT_FLOAT_EQ(cosine.lr_at(0), 0.1f);  // no step at lr 0 unless asked
  EXPECT_FLOAT_EQ(cosine.lr_at(4), 0.5f);
  EXPECT_FLOAT_EQ(cosine.lr_at(9), 1.0f);
  EXPECT_FLOAT_EQ(cosine.lr_at(10), 1.0f);
  LrSchedule from_zero({.name = "constant", .warmup_steps = 10, .warmup_start_factor = 0.0f}, 1.0f, 256, 20);
  EXPECT_FLOAT_EQ(from_zero.lr_at(0), 0.0f);  // asked: PyTorch's LinearLR from 0
  EXPECT_FLOAT_EQ(from_zero.lr_at(5), 0.5f);
  LrSchedule from_third({.name = "constant", .warmup_steps = 3, .warmup_start_factor = 1.0f / 3}, 0.9f, 256, 20);
  EXPECT_FLOAT_EQ(from_third.lr_at(0), 0.3f);
  EXPECT_FLOAT_EQ(from_third.lr_at(3), 0.9f);
  EXPECT_NEAR(cosine.lr_at(60), 0.5f, 1e-6);
  EXPECT_NEAR(cosine.lr_at(110), 0.0f, 1e-6);
  LrSchedule multistep({.name = "multistep", .milestones = {3, 6}, .gamma = 0.1f}, 1.0f, 256, 10);
  EXPECT_FLOAT_EQ(multistep.lr_at(2), 1.0f);
  EXPECT_FLOAT_EQ(multistep.lr_at(3), 0.1f);
  EXPECT_NEAR(multistep.lr_at(7), 0.01f, 1e-7);
  LrSchedule step({.name = "step", .step_size = 4, .gamma = 0.5f}, 0.8f, 256, 10);
  EXPECT_FLOAT_EQ(step.lr_at(8), 0.2f);
  LrSchedule poly({.name = "polynomial", .min_lr = 0.1f, .power = 2.0f}, 1.1f, 256, 10);
  EXPECT_NEAR(poly.lr_at(5), 0.1f + 1.0f * 0.25f, 1e-6);
  LrSchedule scaled({.name = "constant", .scale_lr_with_batch = true, .reference_batch_size = 256}, 0.1f, 1024, 10);
  EXPECT_FLOAT_EQ(scaled.lr_at(3), 0.4f);
  EXPECT_THROW(LrSchedule({.name = "cosin"}, 0.1f, 256, 10), Error);
}

}  // namespace
}  // namespace tandem::optim
