// Every model of the registry under precision: bf16 on cuda:0 against the same
// model's f32 step on the CPU: the loss within 2% and the gradients within
// twice what rounding the weights to bf16 alone moves them
// (bf16_models_test.cpp's yardstick), and visibly apart (bf16 really ran). On
// the GPU the ResNets keep bf16 activations between layers (their batch norms
// write bf16). Skips, with the reason, where the CUDA plugin is not loaded or
// sees no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/nn/init.h"
#include "tests/models/bf16_step_util.h"
#include "tests/support/gpu.h"

namespace tandem::models {
namespace {

class Bf16ModelsGpu : public ::testing::TestWithParam<ModelSpec> {};

TEST_P(Bf16ModelsGpu, StepWithinTwiceTheEffectOfRoundingTheWeightsOfTheCpusF32Step) {
  TANDEM_REQUIRE_PLUGIN_GPU();
  const ModelSpec& spec = GetParam();
  nn::init::manual_seed(1);
  auto cpu_model = create_model(spec), gpu_model = create_model(spec);
  gpu_model->load_state_dict(cpu_model->state_dict());
  gpu_model->to(Device::cuda(0));
  const testing::Inputs in = testing::inputs_for(spec);
  ExecutionContext cpu(Device::cpu(), 2, 1), gpu(Device::cuda(0), 0, 1, KernelOptions{.precision = Precision::kBf16});
  const testing::Step f32 = testing::step_of(*cpu_model, cpu, in), bf16 = testing::step_of(*gpu_model, gpu, in);
  testing::round_parameters_to_bf16(*cpu_model);
  const double sensitivity = testing::rel_norm(testing::step_of(*cpu_model, cpu, in).grads, f32.grads);
  EXPECT_NEAR(bf16.loss, f32.loss, 2e-2 * std::fabs(f32.loss));
  const double error = testing::rel_norm(bf16.grads, f32.grads);
  EXPECT_LT(error, 2 * sensitivity + 0.01) << "rounding the weights alone: " << sensitivity;
  EXPECT_GT(error, 1e-5) << "the bf16 step gave the f32 step's gradients: no product ran in bf16";
  for (auto& [name, p] : gpu_model->named_parameters()) EXPECT_EQ(p.value().dtype(), DType::kF32) << name;
}

INSTANTIATE_TEST_SUITE_P(Registry, Bf16ModelsGpu, ::testing::ValuesIn(testing::bf16_cases()),
                         [](const auto& test) { return test.param.name; });

}  // namespace
}  // namespace tandem::models
