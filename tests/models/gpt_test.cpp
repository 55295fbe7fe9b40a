// GPT (nanoGPT's names, tied lm_head, GPT-2's initialisation) and ViT (torchvision's names) as
// built here, and generation: greedy decoding with the key/value cache gives the tokens decoding
// without it gives, also once the sequence outgrows block_size; the packed attention of the forward
// gives the logits of the cache's split heads; top-k of 1 is greedy; sampling repeats from its seed.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "engine/autograd/ops.h"
#include "engine/nn/init.h"
#include "models/gpt_generate.h"
#include "models/registry.h"
#include "models/vit.h"

namespace tandem::models {
namespace {

std::shared_ptr<Gpt> small_gpt(uint64_t seed, bool bias = true) {
  nn::init::manual_seed(seed);
  return std::dynamic_pointer_cast<Gpt>(create_model(
      {.name = "gpt", .block_size = 12, .vocab_size = 29, .n_layer = 2, .n_head = 2, .n_embd = 16, .bias = bias}));
}

TEST(Gpt, HasNanoGptsNamesWithTheLmHeadTiedToTheTokenEmbedding) {
  auto model = small_gpt(1);
  std::set<std::string> state;
  for (auto& [name, t] : model->state_dict()) state.insert(name);
  for (const char* name : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                           "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_attn.weight",
                           "transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_proj.weight",
                           "transformer.h.1.ln_2.bias", "transformer.h.1.mlp.c_fc.weight",
                           "transformer.h.1.mlp.c_proj.bias", "transformer.ln_f.weight", "lm_head.weight"}) {
    EXPECT_EQ(state.count(name), 1u) << name;
  }
  EXPECT_EQ(state.size(), 2u + 2 * 12 + 2 + 1);  // wte, wpe, 12 per block, ln_f, the tied lm_head
  // One parameter for the tied pair (the optimizer updates it once), under its first name.
  int64_t tied = 0;
  for (auto& [name, p] : model->named_parameters()) tied += name == "lm_head.weight" || name == "transformer.wte.weight";
  EXPECT_EQ(tied, 1);
  auto without_bias = small_gpt(1, false);
  for (auto& [name, t] : without_bias->state_dict()) EXPECT_FALSE(name.ends_with(".bias")) << name;
}

TEST(Gpt, InitialisesAsGpt2) {
  nn::init::manual_seed(2);
  auto model = create_model({.name = "gpt", .block_size = 64, .vocab_size = 512, .n_layer = 4, .n_head = 4,
                             .n_embd = 128});
  auto stddev = [](const Tensor& t) {
    double s = 0.0, q = 0.0;
    std::vector<float> v = t.to_vector();
    for (float x : v) {
      s += x;
      q += static_cast<double>(x) * x;
    }
    const double n = static_cast<double>(v.size());
    return std::sqrt(q / n - (s / n) * (s / n));
  };
  for (auto& [name, p] : model->named_parameters()) {
    if (name.ends_with(".bias")) {
      EXPECT_EQ(stddev(p.value()), 0.0) << name;
    } else if (name.ends_with("c_proj.weight")) {
      EXPECT_NEAR(stddev(p.value()), 0.02 / std::sqrt(8.0), 0.0008) << name;
    } else if (p.shape().rank() == 2) {
      EXPECT_NEAR(stddev(p.value()), 0.02, 0.001) << name;
    }
  }
}

TEST(Gpt, GreedyGenerationWithTheCacheGivesTheTokensWithoutIt) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  auto model = small_gpt(3);
  const std::vector<int64_t> prompt = {3, 17, 8};
  GenerateOptions greedy{.max_new_tokens = 20, .temperature = 0.0f};  // 23 tokens: the window slides past 12
  std::vector<int64_t> cached = generate(ctx, *model, prompt, greedy);
  greedy.use_cache = false;
  std::vector<int64_t> uncached = generate(ctx, *model, prompt, greedy);
  EXPECT_EQ(cached, uncached);
  ASSERT_EQ(cached.size(), 20u);
  // Top-k of 1 at any temperature is greedy too.
  GenerateOptions top1{.max_new_tokens = 20, .temperature = 0.7f, .top_k = 1, .seed = 5};
  EXPECT_EQ(generate(ctx, *model, prompt, top1), cached);
}

// The forward without a cache runs packed_self_attention; the cached one (from empty, over the
// whole sequence) still splits the heads and calls scaled_dot_product_attention: the same bits.
TEST(Gpt, PackedAttentionGivesTheLogitsOfTheSplitHeadsPath) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  auto model = small_gpt(6);
  model->eval();
  Tensor ids = Tensor::empty({2, 11}, DType::kI64);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 7 + 3) % 29;
  const std::vector<float> packed = model->forward(ctx, autograd::Variable(ids)).value().to_vector();
  KvCache cache;
  const std::vector<float> split = model->forward(ctx, ids, cache).value().to_vector();
  ASSERT_EQ(packed.size(), 2u * 11 * 29);
  EXPECT_EQ(packed, split);
}

TEST(Gpt, SamplingRepeatsFromItsSeed) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  auto model = small_gpt(4);
  GenerateOptions o{.max_new_tokens = 15, .temperature = 1.5f, .top_k = 10, .seed = 9};
  std::vector<int64_t> a = generate(ctx, *model, {1}, o), b = generate(ctx, *model, {1}, o);
  EXPECT_EQ(a, b);
  o.seed = 10;
  EXPECT_NE(generate(ctx, *model, {1}, o), a);
  for (int64_t t : a) EXPECT_TRUE(t >= 0 && t < 29);
}

TEST(Gpt, RefusesMorePositionsThanItsBlock) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  auto model = small_gpt(5);
  Tensor ids = Tensor::zeros({1, 13}, DType::kI64);
  try {
    model->forward(ctx, autograd::Variable(ids));
    FAIL() << "13 positions ran through a block of 12";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed block_size 12"), std::string::npos) << e.what();
  }
}

TEST(Vit, HasTorchvisionsNamesAndShapes) {
  nn::init::manual_seed(6);
  auto model = create_model({.name = "vit", .num_classes = 10, .in_channels = 1, .input_size = 28, .patch_size = 7,
                             .num_layers = 2, .num_heads = 3, .hidden_dim = 48, .mlp_dim = 96});
  auto state = model->state_dict();
  EXPECT_EQ(state.at("class_token").shape(), (Shape{1, 1, 48}));
  EXPECT_EQ(state.at("conv_proj.weight").shape(), (Shape{48, 1, 7, 7}));
  EXPECT_EQ(state.at("encoder.pos_embedding").shape(), (Shape{1, 17, 48}));
  EXPECT_EQ(state.at("encoder.layers.encoder_layer_1.self_attention.in_proj_weight").shape(), (Shape{144, 48}));
  EXPECT_EQ(state.at("encoder.layers.encoder_layer_0.mlp.3.weight").shape(), (Shape{48, 96}));
  EXPECT_EQ(state.at("encoder.ln.bias").shape(), (Shape{48}));
  EXPECT_EQ(state.at("heads.head.weight").shape(), (Shape{10, 48}));
  ExecutionContext ctx(Device::cpu(), 2, 1);
  autograd::Variable y = model->forward(ctx, autograd::Variable(Tensor::zeros({2, 1, 28, 28})));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
}

}  // namespace
}  // namespace tandem::models
