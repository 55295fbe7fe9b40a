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
#include "tests/models/bf16_step_util.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::models {
namespace {

using testing::bf16_cases;
using testing::Inputs;
using testing::inputs_for;
using testing::rel_norm;
using testing::Step;

struct Case {
  nn::ModelSpec spec;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const nn::ModelSpec& spec : bf16_cases()) out.push_back({spec});
  return out;
}

Step step_of(nn::Module& model, Precision precision, const Inputs& in) {
  ExecutionContext ctx(Device::cpu(), 2, 1, KernelOptions{.precision = precision});
  return testing::step_of(model, ctx, in);
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
  testing::round_parameters_to_bf16(*model);
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
