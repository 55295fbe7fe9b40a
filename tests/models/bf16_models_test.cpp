// Every model of the registry under precision: bf16 on the CPU: its loss and gradients stay within
// bf16's tolerance of the f32 step's (and visibly apart from them: bf16 really ran), and an optimizer
// step leaves the master weights and the optimizer's state f32, not rounded to bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/autograd/ops.h"
#include "engine/nn/init.h"
#include "engine/optim/optimizer.h"
#include "models/registry.h"
#include "tests/support/bf16_cpu.h"
#include "transformer_test_util.h"

namespace tandem::models {
namespace {

struct Case {
  nn::ModelSpec spec;
};

std::vector<Case> cases() {
  return {
      {{.name = "resnet20", .num_classes = 10, .in_channels = 3, .input_size = 16, .channels_last = true}},
      {{.name = "resnet18", .num_classes = 7, .in_channels = 3, .input_size = 32}},
      {{.name = "mlp", .num_classes = 10, .in_channels = 1, .input_size = 8, .hidden = {64, 32}}},
      {{.name = "small_cnn", .num_classes = 10, .in_channels = 1, .input_size = 28}},
      {{.name = "vit", .num_classes = 10, .in_channels = 3, .input_size = 16, .patch_size = 4, .num_layers = 2,
        .num_heads = 2, .hidden_dim = 32, .mlp_dim = 64}},
      {{.name = "gpt", .block_size = 16, .vocab_size = 64, .n_layer = 2, .n_head = 2, .n_embd = 32}},
  };
}

struct Step {
  double loss;
  std::vector<std::vector<float>> grads;
};

struct Inputs {
  Tensor x, labels;
  int64_t divisor;
};

Inputs inputs_for(const nn::ModelSpec& s) {
  const int64_t n = 4;
  if (s.name == "gpt") {
    return {testing::random_ids({n, s.block_size}, s.vocab_size, 3),
            testing::random_ids({n, s.block_size}, s.vocab_size, 4), n * s.block_size};
  }
  Generator g(5);
  Tensor x = Tensor::empty({n, s.in_channels, s.input_size, s.input_size});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = g.normal();
  if (s.channels_last) x = x.to_format(MemoryFormat::kChannelsLast);
  return {x, testing::random_ids({n}, s.num_classes, 6), n};
}

Step step_of(nn::Module& model, Precision precision, const Inputs& in) {
  ExecutionContext ctx(Device::cpu(), 2, 1, KernelOptions{.precision = precision});
  for (auto& [name, p] : model.named_parameters()) p.zero_grad();
  autograd::Variable loss =
      autograd::cross_entropy_loss(ctx, model(ctx, autograd::Variable(in.x)), in.labels, 0.0f, in.divisor);
  loss.backward(&ctx);
  Step s{loss.value().to_vector()[0], {}};
  for (auto& [name, p] : model.named_parameters()) s.grads.push_back(p.grad().to_vector());
  return s;
}

double rel_norm(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    for (size_t j = 0; j < want[i].size(); ++j) {
      diff += std::pow(double{got[i][j]} - want[i][j], 2);
      norm += std::pow(double{want[i][j]}, 2);
    }
  }
  return std::sqrt(diff / norm);
}

class Bf16Models : public ::testing::TestWithParam<Case> {};

// The yardstick is the model's own sensitivity: the f32 step with its weights merely rounded to bf16.
// At initialisation, with a batch of 4 and ReLUs whose inputs sit near 0 (a flipped unit changes its
// gradient entirely), that alone moves ResNet-18's gradients by 61% in norm and the MLP's by 11%; the
// bf16 step may differ from the f32 one by no more than twice as much.
TEST_P(Bf16Models, GradientsWithinTwiceTheEffectOfRoundingTheWeights) {
  TANDEM_REQUIRE_BF16_CPU();
  const Case& c = GetParam();
  nn::init::manual_seed(1);
  auto model = create_model(c.spec);
  const Inputs in = inputs_for(c.spec);
  const Step f32 = step_of(*model, Precision::kF32, in), bf16 = step_of(*model, Precision::kBf16, in);
  for (auto& [name, p] : model->named_parameters()) {
    float* v = p.value().data<float>();
    for (int64_t i = 0; i < p.value().numel(); ++i) v[i] = bf16_to_float(float_to_bf16(v[i]));
  }
  const double sensitivity = rel_norm(step_of(*model, Precision::kF32, in).grads, f32.grads);
  EXPECT_NEAR(bf16.loss, f32.loss, 2e-2 * std::fabs(f32.loss));
  const double error = rel_norm(bf16.grads, f32.grads);
  EXPECT_LT(error, 2 * sensitivity + 0.01) << "rounding the weights alone: " << sensitivity;
  EXPECT_GT(error, 1e-5) << "the bf16 step gave the f32 step's gradients: no product ran in bf16";
}

TEST_P(Bf16Models, MasterWeightsAndOptimizerStateStayF32) {
  TANDEM_REQUIRE_BF16_CPU();
  const Case& c = GetParam();
  nn::init::manual_seed(1);
  auto model = create_model(c.spec);
  auto params = model->named_parameters();
  auto optimizer = optim::make_optimizer(params, {.name = "adamw", .lr = 1e-3f});
  const Inputs in = inputs_for(c.spec);
  std::vector<std::vector<float>> before;
  for (auto& [name, p] : params) before.push_back(p.value().to_vector());
  const Step step = step_of(*model, Precision::kBf16, in);
  ExecutionContext ctx(Device::cpu(), 2, 1, KernelOptions{.precision = Precision::kBf16});
  optimizer->step(ctx);
  // Adam moves each weight with a gradient by about lr, less than bf16's spacing near most weights:
  // f32 masters keep those steps, and their values keep bits below bf16's 8 significant bits.
  int64_t moved = 0, with_gradient = 0, below_bf16 = 0, total = 0;
  size_t i = 0;
  for (auto& [name, p] : params) {
    ASSERT_EQ(p.value().dtype(), DType::kF32) << name;
    const std::vector<float> now = p.value().to_vector();
    for (size_t j = 0; j < now.size(); ++j) {
      uint32_t bits;
      std::memcpy(&bits, &now[j], sizeof bits);
      below_bf16 += (bits & 0xffffu) != 0;
      if (step.grads[i][j] != 0.0f) {
        moved += now[j] != before[i][j];
        ++with_gradient;
      }
      ++total;
    }
    ++i;
  }
  EXPECT_GT(moved, with_gradient * 9 / 10);
  EXPECT_GT(with_gradient, 0);
  EXPECT_GT(below_bf16, total / 2);
  for (auto& [name, t] : optimizer->state_dict()) EXPECT_EQ(t.dtype(), DType::kF32) << name;
  EXPECT_FALSE(optimizer->state_dict().empty());
}

INSTANTIATE_TEST_SUITE_P(Registry, Bf16Models, ::testing::ValuesIn(cases()),
                         [](const auto& test) { return test.param.spec.name; });

}  // namespace
}  // namespace tandem::models
