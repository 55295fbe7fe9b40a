// A weight's bf16 shadow under precision: bf16 (Tensor::bf16_shadow, backend::bf16_weight): made by
// the first forward, reused while the weight is unchanged, rounded again after any write the
// version counter sees (copy_from, fill; a broadcast: replica_sync_test), and rewritten by SGD's and AdamW's update
// kernels with the bits a fresh rounding gives, so training with shadows is bit for bit training
// that rounds every weight in every forward.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"
#include "engine/optim/optimizer.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::optim {
namespace {

using autograd::Variable;

KernelOptions bf16_options() {
  KernelOptions o;
  o.precision = Precision::kBf16;
  return o;
}

Tensor ramp(const Shape& shape, float phase) {
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(phase + 0.37f * static_cast<float>(i)) * 1.7f;
  return Tensor::from_vector(v, shape);
}

std::vector<uint16_t> bits(const Tensor& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.raw_data(), out.size() * sizeof(uint16_t));
  return out;
}

// A fresh rounding of w's present values (a clone has no shadow).
std::vector<uint16_t> rounded(ExecutionContext& ctx, const Tensor& w) { return bits(backend::bf16_operand(ctx, w.clone())); }

TEST(Bf16Shadow, TheFirstForwardRoundsTheWeightAndLaterOnesReuseIt) {
  ExecutionContext ctx(Device::cpu(), 0, 0, bf16_options());
  Tensor w = ramp({5, 7}, 0.1f);
  EXPECT_FALSE(w.bf16_shadow().defined());
  Tensor first = backend::bf16_weight(ctx, w);
  ASSERT_EQ(first.dtype(), DType::kBF16);
  EXPECT_EQ(bits(first), rounded(ctx, w));
  EXPECT_TRUE(w.bf16_shadow_current());
  Tensor second = backend::bf16_weight(ctx, w);
  EXPECT_TRUE(second.shares_storage_with(first));
}

TEST(Bf16Shadow, AWriteToTheWeightMakesTheNextForwardRoundAgainIntoTheSameMemory) {
  ExecutionContext ctx(Device::cpu(), 0, 0, bf16_options());
  Tensor w = ramp({4, 6}, 0.3f);
  Tensor before = backend::bf16_weight(ctx, w);
  std::vector<uint16_t> old_bits = bits(before);
  w.copy_from(ramp({4, 6}, 2.0f));
  EXPECT_FALSE(w.bf16_shadow_current());
  Tensor after = backend::bf16_weight(ctx, w);
  EXPECT_TRUE(after.shares_storage_with(before));
  EXPECT_EQ(bits(after), rounded(ctx, w));
  EXPECT_NE(bits(after), old_bits);
  backend::fill(ctx, 0.75f, w);  // an init in place
  EXPECT_EQ(bits(backend::bf16_weight(ctx, w)), rounded(ctx, w));
}

TEST(Bf16Shadow, AReshapedViewReadsTheShadowWithItsOwnShape) {
  ExecutionContext ctx(Device::cpu(), 0, 0, bf16_options());
  Tensor w = ramp({3, 8}, 0.9f);
  Tensor shadow = backend::bf16_weight(ctx, w);
  Tensor view = backend::bf16_weight(ctx, w.reshape({6, 4}));
  EXPECT_TRUE(view.shares_storage_with(shadow));
  EXPECT_EQ(view.shape(), Shape({6, 4}));
}

TEST(Bf16Shadow, OtherPrecisionsMakeNone) {
  for (Precision p : {Precision::kF32, Precision::kTf32}) {
    KernelOptions o;
    o.precision = p;
    ExecutionContext ctx(Device::cpu(), 0, 0, o);
    Tensor w = ramp({2, 3}, 0.0f);
    Tensor got = backend::bf16_weight(ctx, w);
    EXPECT_TRUE(got.shares_storage_with(w)) << precision_name(p);
    EXPECT_FALSE(w.bf16_shadow().defined()) << precision_name(p);
  }
}

// A linear layer's weight and bias through one step of `opt`, the weight's shadow made by the forward.
void step_once(ExecutionContext& ctx, NamedParameters& params, Optimizer& opt, int s) {
  Variable x(ramp({3, 6}, 0.5f * static_cast<float>(s)));
  Variable loss = autograd::sum(ctx, autograd::linear(ctx, x, params[0].second, params[1].second));
  opt.zero_grad();
  loss.backward(&ctx);
  opt.step(ctx);
}

class OptimizerShadow : public ::testing::TestWithParam<OptimizerOptions> {};

TEST_P(OptimizerShadow, TheUpdateKernelRewritesTheShadowWithAFreshRoundingsBits) {
  TANDEM_REQUIRE_BF16_CPU();  // the forward's bf16 product
  ExecutionContext ctx(Device::cpu(), 0, 0, bf16_options());
  NamedParameters params{{"w", Variable(ramp({5, 6}, 0.2f), true, "w")},
                         {"b", Variable(ramp({5}, 0.4f), true, "b")}};
  auto opt = make_optimizer(params, GetParam());
  for (int s = 0; s < 3; ++s) {
    step_once(ctx, params, *opt, s);
    const Tensor& w = params[0].second.value();
    ASSERT_TRUE(w.bf16_shadow_current()) << "step " << s;
    EXPECT_EQ(bits(w.bf16_shadow()), rounded(ctx, w)) << "step " << s;
    EXPECT_FALSE(params[1].second.value().bf16_shadow().defined());  // a bias is added in f32, never rounded
  }
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, OptimizerShadow,
    ::testing::Values(OptimizerOptions{.name = "sgd", .lr = 0.05f, .momentum = 0.0f},
                      OptimizerOptions{.name = "sgd", .lr = 0.05f, .weight_decay = 0.01f, .momentum = 0.9f,
                                       .nesterov = true},
                      OptimizerOptions{.name = "adamw", .lr = 0.01f, .weight_decay = 0.1f}),
    [](const ::testing::TestParamInfo<OptimizerOptions>& param_info) {
      const OptimizerOptions& o = param_info.param;
      return o.name + (o.nesterov ? "_nesterov" : o.momentum != 0.0f ? "_momentum" : "");
    });

// Losses of `steps` AdamW steps of a two-layer MLP; stale_every_forward bumps each weight's version
// before each forward, so every forward rounds every weight afresh (what happened before shadows).
std::vector<float> train_mlp(bool stale_every_forward, int steps) {
  ExecutionContext ctx(Device::cpu(), 0, 7, bf16_options());
  NamedParameters params{{"w1", Variable(ramp({16, 8}, 0.1f), true, "w1")},
                         {"b1", Variable(ramp({16}, 0.2f), true, "b1")},
                         {"w2", Variable(ramp({4, 16}, 0.3f), true, "w2")},
                         {"b2", Variable(ramp({4}, 0.4f), true, "b2")}};
  auto opt = make_optimizer(params, OptimizerOptions{.name = "adamw", .lr = 0.02f, .weight_decay = 0.05f});
  std::vector<float> losses;
  Tensor labels = Tensor::empty({32}, DType::kI64);
  for (int64_t i = 0; i < 32; ++i) labels.data<int64_t>()[i] = (i * 7) % 4;
  for (int s = 0; s < steps; ++s) {
    if (stale_every_forward) {
      for (auto& [name, p] : params) p.value().bump_version();
    }
    Variable x(ramp({32, 8}, 0.05f * static_cast<float>(s)));
    Variable h = autograd::relu(ctx, autograd::linear(ctx, x, params[0].second, params[1].second));
    Variable loss =
        autograd::cross_entropy_loss(ctx, autograd::linear(ctx, h, params[2].second, params[3].second), labels, 0.0f, 32);
    opt->zero_grad();
    loss.backward(&ctx);
    opt->step(ctx);
    losses.push_back(loss.value().to_vector()[0]);
  }
  for (auto& [name, p] : params) {
    for (float v : p.value().to_vector()) losses.push_back(v);
  }
  return losses;
}

TEST(Bf16Shadow, TrainingWithShadowsIsBitwiseTrainingThatRoundsEveryForward) {
  TANDEM_REQUIRE_BF16_CPU();
  std::vector<float> shadowed = train_mlp(false, 6), rounded_each_time = train_mlp(true, 6);
  ASSERT_EQ(shadowed.size(), rounded_each_time.size());
  for (size_t i = 0; i < shadowed.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(shadowed[i]), std::bit_cast<uint32_t>(rounded_each_time[i])) << i;
  }
  EXPECT_LT(shadowed[5], shadowed[0]);  // it trains
}

}  // namespace
}  // namespace tandem::optim
