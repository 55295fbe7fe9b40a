// GPT and ViT against PyTorch (Debian's python3-torch and python3-torchvision; skipped, visibly,
// where they are missing): the reference model loads our state_dict strictly (nanoGPT's and
// torchvision's names), and its logits, mean cross-entropy and every parameter's gradient agree
// with ours within 1e-4 of each tensor's scale, in f32.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "engine/autograd/ops.h"
#include "engine/core/random.h"
#include "engine/nn/init.h"
#include "engine/train/checkpoint/safetensors.h"
#include "engine/nn/transformer_layers.h"
#include "models/registry.h"
#include "tests/models/transformer_test_util.h"
#include "tests/support/temp_dir.h"

namespace tandem::models {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

bool have_torch() {
  return std::system(fmt::format("{} -c 'import torch, torchvision' >/dev/null 2>&1", kPython).c_str()) == 0;
}

using testing::random_ids;
using testing::scaled_error;

// Runs the reference on the model's weights and inputs; compares logits, loss and gradients.
void compare_with_torch(const std::string& kind, const std::string& config_json, nn::Module& model,
                        const train::TensorMap& inputs, const autograd::Variable& logits,
                        const autograd::Variable& loss) {
  testing::TempDir dir;
  train::write_safetensors(dir / "model.safetensors", model.state_dict(), {{"format", "pt"}});
  train::write_safetensors(dir / "input.safetensors", inputs);
  const std::string command =
      fmt::format("{} {}/tests/models/torch_transformer_check.py {} '{}' {} {} {}", kPython, TANDEM_SOURCE_DIR, kind,
                  config_json, (dir / "model.safetensors").string(), (dir / "input.safetensors").string(),
                  (dir / "torch.safetensors").string());
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  train::SafetensorsFile torch = train::read_safetensors(dir / "torch.safetensors");
  EXPECT_LT(scaled_error(logits.value(), torch.tensors.at("logits")), 1e-4) << "logits";
  const float reference_loss = torch.tensors.at("loss").to_vector()[0];
  EXPECT_NEAR(loss.value().to_vector()[0], reference_loss, 1e-5 * std::max(1.0f, std::fabs(reference_loss))) << "loss";
  int compared = 0;
  for (auto& [name, p] : model.named_parameters()) {
    auto it = torch.tensors.find("grad." + name);
    ASSERT_NE(it, torch.tensors.end()) << "PyTorch has no parameter " << name;
    ASSERT_TRUE(p.has_grad()) << name;
    EXPECT_LT(scaled_error(p.grad(), it->second), 1e-4) << "gradient of " << name;
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

TEST(TransformerTorch, GptMatchesNanoGptsForwardAndGradients) {
  if (!have_torch()) GTEST_SKIP() << "python3-torch and python3-torchvision are not installed";
  ExecutionContext ctx(Device::cpu(), 2, 1);
  nn::init::manual_seed(3);
  auto model = create_model({.name = "gpt", .block_size = 16, .vocab_size = 37, .n_layer = 2, .n_head = 2,
                             .n_embd = 24, .bias = true});
  Tensor idx = random_ids({3, 11}, 37, 1), targets = random_ids({3, 11}, 37, 2);
  autograd::Variable logits = model->forward(ctx, autograd::Variable(idx));
  autograd::Variable loss = autograd::cross_entropy_loss(ctx, logits, targets, 0.0f, 33);
  loss.backward(&ctx);
  compare_with_torch("gpt", R"({"block_size": 16, "vocab_size": 37, "n_layer": 2, "n_head": 2, "n_embd": 24,
                               "bias": true})",
                     *model, {{"idx", idx}, {"targets", targets}}, logits, loss);
  // The tied pair is one parameter (listed once) under two names in the state_dict.
  auto state = model->state_dict();
  EXPECT_TRUE(state.at("lm_head.weight").shares_storage_with(state.at("transformer.wte.weight")));
}

TEST(TransformerTorch, VitMatchesTorchvisionsForwardAndGradients) {
  if (!have_torch()) GTEST_SKIP() << "python3-torch and python3-torchvision are not installed";
  ExecutionContext ctx(Device::cpu(), 2, 1);
  nn::init::manual_seed(4);
  auto model = create_model({.name = "vit", .num_classes = 5, .in_channels = 2, .input_size = 12, .patch_size = 4,
                             .num_layers = 2, .num_heads = 2, .hidden_dim = 16, .mlp_dim = 24});
  // torchvision zeroes the head: give it values, or its input's gradient would be all zero.
  for (auto& [name, p] : model->named_parameters()) {
    if (name.starts_with("heads.")) nn::init::normal(p.value(), 0.3f);
  }
  Generator g(5);
  Tensor x = Tensor::empty({3, 2, 12, 12});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = g.normal();
  Tensor labels = random_ids({3}, 5, 6);
  autograd::Variable logits = model->forward(ctx, autograd::Variable(x));
  autograd::Variable loss = autograd::cross_entropy_loss(ctx, logits, labels, 0.0f, 3);
  loss.backward(&ctx);
  compare_with_torch("vit", R"({"image_size": 12, "patch_size": 4, "num_layers": 2, "num_heads": 2, "hidden_dim": 16,
                               "mlp_dim": 24, "num_classes": 5, "in_channels": 2})",
                     *model, {{"x", x}, {"labels", labels}}, logits, loss);
}

TEST(TransformerTorch, EncoderLayerMatchesTorchNnInBothNormPlacements) {
  if (!have_torch()) GTEST_SKIP() << "python3-torch and python3-torchvision are not installed";
  for (const bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "norm_first" : "post-norm");
    ExecutionContext ctx(Device::cpu(), 2, 1);
    nn::init::manual_seed(7);
    nn::TransformerEncoderLayer layer({.d_model = 12, .nhead = 3, .dim_feedforward = 20, .dropout = 0.0f,
                                       .activation = "gelu", .layer_norm_eps = 1e-5f, .norm_first = norm_first});
    Generator g(8);
    Tensor x = Tensor::empty({2, 5, 12}), dy = Tensor::empty({2, 5, 12});
    for (Tensor* t : {&x, &dy}) {
      for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = g.normal();
    }
    autograd::Variable y = layer.forward(ctx, autograd::Variable(x));
    autograd::Variable loss = autograd::sum(ctx, autograd::mul(ctx, y, autograd::Variable(dy)));
    loss.backward(&ctx);
    compare_with_torch("encoder_layer",
                       fmt::format(R"({{"d_model": 12, "nhead": 3, "dim_feedforward": 20, "activation": "gelu",
                                      "layer_norm_eps": 1e-5, "norm_first": {}}})",
                                   norm_first),
                       layer, {{"x", x}, {"dy", dy}}, y, loss);
  }
}

}  // namespace
}  // namespace tandem::models
