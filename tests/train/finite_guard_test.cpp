// The NaN guard over the weights: a loss can stay finite while a parameter holds NaN (ReLU turns NaN
// activations into zeros), so the trainer asks for the first parameter that is not finite by name.
#include "engine/train/finite_guard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "engine/nn/layers.h"

namespace tandem::train {
namespace {

// Parameters in order: 0.weight (2, 3), 0.bias (2), 2.weight (1, 2), 2.bias (1).
std::shared_ptr<nn::Sequential> small_model() {
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(3, 2));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(2, 1));
  return model;
}

// Sets element i of the parameter `name` of model.
void poke(nn::Module& model, const std::string& name, int64_t i, float value) {
  for (auto& [n, p] : model.named_parameters()) {
    if (n == name) {
      p.value().data<float>()[i] = value;
      return;
    }
  }
  FAIL() << "no parameter " << name;
}

TEST(FiniteGuard, NamesTheFirstParameterHoldingANanOrAnInf) {
  ExecutionContext ctx(Device::cpu(), 1);
  auto model = small_model();
  EXPECT_EQ(first_nonfinite_parameter(ctx, *model), "");

  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  poke(*model, "0.bias", 1, nan);
  EXPECT_EQ(first_nonfinite_parameter(ctx, *model), "0.bias");
  poke(*model, "0.bias", 1, 0.5f);
  EXPECT_EQ(first_nonfinite_parameter(ctx, *model), "");

  poke(*model, "2.weight", 0, -inf);
  EXPECT_EQ(first_nonfinite_parameter(ctx, *model), "2.weight");
  poke(*model, "2.bias", 0, inf);
  EXPECT_EQ(first_nonfinite_parameter(ctx, *model), "2.weight");  // the first, in registration order
  poke(*model, "0.weight", 5, nan);
  EXPECT_EQ(first_nonfinite_parameter(ctx, *model), "0.weight");
}

TEST(FiniteGuard, AModelWithoutParametersIsFinite) {
  ExecutionContext ctx(Device::cpu(), 1);
  nn::ReLU relu;
  EXPECT_EQ(first_nonfinite_parameter(ctx, relu), "");
}

}  // namespace
}  // namespace tandem::train
