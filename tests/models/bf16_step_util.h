// One training step of each registry model in a given precision, on a given
// device, for the bf16 tests on the CPU (bf16_models_test.cpp) and on the GPU
// (bf16_models_gpu_test.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/context.h"
#include "engine/nn/module.h"
#include "models/registry.h"

namespace tandem::testing {

// Small instances of every model of the registry (ResNet-20 channels_last,
// ResNet-18 NCHW).
std::vector<models::ModelSpec> bf16_cases();

struct Step {
  double loss;
  std::vector<std::vector<float>> grads;  // every parameter's, in named_parameters() order
};

struct Inputs {
  Tensor x, labels;  // on the CPU
  int64_t divisor;   // the loss's divisor: examples, or tokens for the GPT
};
Inputs inputs_for(const models::ModelSpec& spec);

// Zeroes the gradients, then runs forward and backward on ctx's device (the
// model's).
Step step_of(nn::Module& model, ExecutionContext& ctx, const Inputs& in);

// ||got - want|| / ||want|| over all the gradients.
double rel_norm(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want);

// The model's parameters (on the CPU) rounded to bf16's values: the yardstick
// of the bf16 tests.
void round_parameters_to_bf16(nn::Module& model);

}  // namespace tandem::testing
