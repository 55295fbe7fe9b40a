// A model's size is known from its spec before anything is allocated: the estimate matches the
// built models' parameter counts, and a model whose weights alone exceed the machine's memory is a
// named error, not a build that ends in the OOM killer.
#include <gtest/gtest.h>

#include <chrono>

#include "models/model_size.h"
#include "models/registry.h"

namespace tandem::models {
namespace {

double built_parameters(const ModelSpec& spec) {
  double n = 0;
  for (const auto& [name, p] : create_model(spec)->named_parameters()) n += static_cast<double>(p.value().numel());
  return n;
}

TEST(ModelSize, EstimatesFollowTheBuiltModels) {
  ModelSpec mlp{.name = "mlp", .num_classes = 10, .in_channels = 1, .input_size = 28, .hidden = {64, 32}};
  EXPECT_EQ(estimated_parameters(mlp), built_parameters(mlp));
  ModelSpec gpt{.name = "gpt"};
  gpt.block_size = 32, gpt.vocab_size = 256, gpt.n_layer = 2, gpt.n_head = 2, gpt.n_embd = 32;
  // Biases and norms are left out of the estimate: within 10% at this tiny size.
  EXPECT_NEAR(estimated_parameters(gpt), built_parameters(gpt), 0.1 * built_parameters(gpt));
  ModelSpec vit{.name = "vit", .num_classes = 10, .in_channels = 3, .input_size = 32};
  vit.patch_size = 8, vit.num_layers = 2, vit.num_heads = 2, vit.hidden_dim = 32, vit.mlp_dim = 64;
  EXPECT_NEAR(estimated_parameters(vit), built_parameters(vit), 0.1 * built_parameters(vit));
  ModelSpec gpt2{.name = "gpt"};  // GPT-2 small: 124M
  EXPECT_NEAR(estimated_parameters(gpt2), 124.4e6, 0.5e6);
}

TEST(ModelSize, AModelLargerThanTheMachineIsRefusedBeforeAllocating) {
  ModelSpec mlp{.name = "mlp", .num_classes = 10, .in_channels = 1, .input_size = 28,
                .hidden = {int64_t{1} << 24, int64_t{1} << 24}};
  const auto start = std::chrono::steady_clock::now();
  try {
    create_model(mlp);
    FAIL() << "a 2^48-weight MLP was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("GB of f32 weights alone, more than this machine's"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("hidden"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  ModelSpec gpt{.name = "gpt"};
  gpt.n_embd = int64_t{1} << 20;
  EXPECT_THROW(create_model(gpt), Error);
}

}  // namespace
}  // namespace tandem::models
