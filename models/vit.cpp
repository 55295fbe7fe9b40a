#include "models/vit.h"

#include <cmath>
#include <string>

#include "engine/nn/init.h"

namespace tandem::models {
namespace {

// torchvision's Encoder: pos_embedding, dropout, layers (encoder_layer_0, ...), ln.
class VitEncoder : public nn::Module {
 public:
  explicit VitEncoder(const VitConfig& c) {
    const int64_t patches = (c.image_size / c.patch_size) * (c.image_size / c.patch_size);
    Tensor pos = Tensor::empty({1, patches + 1, c.hidden_dim});
    nn::init::normal(pos, 0.02f);
    pos_embedding_ = register_parameter("pos_embedding", pos);
    dropout_ = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
    layers_ = register_module("layers", std::make_shared<nn::Sequential>());
    for (int64_t i = 0; i < c.num_layers; ++i) {
      layers_->push_back("encoder_layer_" + std::to_string(i), std::make_shared<VitEncoderBlock>(c));
    }
    ln_ = register_module("ln", std::make_shared<nn::LayerNorm>(c.hidden_dim, 1e-6f));
  }
  Variable forward(ExecutionContext& ctx, const Variable& x) override {
    Variable y = dropout_->forward(ctx, autograd::add(ctx, x, pos_embedding_));
    return ln_->forward(ctx, layers_->forward(ctx, y));
  }

 private:
  Variable pos_embedding_;
  std::shared_ptr<nn::Dropout> dropout_;
  std::shared_ptr<nn::Sequential> layers_;
  std::shared_ptr<nn::LayerNorm> ln_;
};

}  // namespace

VitEncoderBlock::VitEncoderBlock(const VitConfig& c) {
  ln_1_ = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.hidden_dim, 1e-6f));
  self_attention_ = register_module(
      "self_attention", std::make_shared<nn::MultiheadAttention>(
                            nn::MultiheadAttentionOptions{c.hidden_dim, c.num_heads, c.attention_dropout, true}));
  dropout_ = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
  ln_2_ = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.hidden_dim, 1e-6f));
  // Each norm feeds linear layers alone (the attention's in_proj, mlp.0): bf16 under precision: bf16.
  ln_1_->keep_bf16_activations(true);
  ln_2_->keep_bf16_activations(true);
  // torchvision's MLPBlock: Linear, GELU, Dropout, Linear, Dropout (mlp.0 and mlp.3 hold weights),
  // xavier_uniform weights and N(0, 1e-6) biases.
  auto fc1 = std::make_shared<nn::Linear>(c.hidden_dim, c.mlp_dim);
  auto fc2 = std::make_shared<nn::Linear>(c.mlp_dim, c.hidden_dim);
  for (auto* fc : {fc1.get(), fc2.get()}) {
    for (auto& [name, p] : fc->named_parameters()) {
      if (name == "weight") nn::init::xavier_uniform(p.value());
      if (name == "bias") nn::init::normal(p.value(), 1e-6f);
    }
  }
  fc1->keep_bf16_activations(true);  // it feeds the GELU alone, which reads bf16 (docs/PRECISION.md)
  // The GELU's output reaches mlp.3 through a dropout, which reads f32 unless it is the identity (p 0).
  auto gelu = std::make_shared<nn::GELU>();
  gelu->keep_bf16_activations(c.dropout == 0.0f);
  mlp_ = register_module("mlp", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                                    fc1, gelu, std::make_shared<nn::Dropout>(c.dropout), fc2,
                                    std::make_shared<nn::Dropout>(c.dropout)}));
}

Variable VitEncoderBlock::forward(ExecutionContext& ctx, const Variable& input) {
  Variable x = dropout_->forward(ctx, self_attention_->forward(ctx, ln_1_->forward(ctx, input)));
  x = autograd::add(ctx, x, input);
  return autograd::add(ctx, x, mlp_->forward(ctx, ln_2_->forward(ctx, x)));
}

Vit::Vit(const VitConfig& c) : config_(c) {
  TANDEM_CHECK(c.patch_size > 0 && c.image_size > 0 && c.image_size % c.patch_size == 0, ErrorCode::kInvalidArgument,
               "vit: image_size {} must be a positive multiple of patch_size {}", c.image_size, c.patch_size);
  TANDEM_CHECK(c.hidden_dim > 0 && c.num_heads > 0 && c.hidden_dim % c.num_heads == 0 && c.num_layers > 0 &&
                   c.mlp_dim > 0,
               ErrorCode::kInvalidArgument,
               "vit: hidden_dim {} must be a positive multiple of num_heads {}, num_layers {} and mlp_dim {} positive",
               c.hidden_dim, c.num_heads, c.num_layers, c.mlp_dim);
  conv_proj_ = register_module("conv_proj", std::make_shared<nn::Conv2d>(nn::Conv2dOptions{
                                                .in_channels = c.in_channels, .out_channels = c.hidden_dim,
                                                .kernel_size = c.patch_size, .stride = c.patch_size}));
  // torchvision: conv_proj's weight from a normal of std sqrt(1 / fan_in) truncated at 2 std (a
  // plain normal here), zero bias.
  for (auto& [name, p] : conv_proj_->named_parameters()) {
    if (name == "weight") {
      nn::init::normal(p.value(), std::sqrt(1.0f / static_cast<float>(nn::init::fan_in(p.shape()))));
    } else {
      p.value().zero_();
    }
  }
  class_token_ = register_parameter("class_token", Tensor::zeros({1, 1, c.hidden_dim}));
  encoder_ = register_module("encoder", std::make_shared<VitEncoder>(c));
  heads_ = register_module("heads", std::make_shared<nn::Sequential>());
  auto head = std::make_shared<nn::Linear>(c.hidden_dim, c.num_classes);
  for (auto& [name, p] : head->named_parameters()) p.value().zero_();  // torchvision zeroes the head
  heads_->push_back("head", head);
}

Variable Vit::forward(ExecutionContext& ctx, const Variable& x) {
  const Shape s = x.shape();
  TANDEM_CHECK(s.rank() == 4 && s[1] == config_.in_channels && s[2] == config_.image_size &&
                   s[3] == config_.image_size,
               ErrorCode::kInvalidArgument, "vit: takes (N, {}, {}, {}) images, got {}", config_.in_channels,
               config_.image_size, config_.image_size, s.str());
  const int64_t n = s[0], hidden = config_.hidden_dim;
  // (N, hidden, h, w) -> (N, hidden, h w) -> (N, h w, hidden), torchvision's _process_input.
  Variable patches = conv_proj_->forward(ctx, x);
  const int64_t tokens = patches.shape()[2] * patches.shape()[3];
  Variable seq = autograd::transpose(ctx, autograd::reshape(ctx, patches, Shape{n, hidden, tokens}), 1, 2);
  Variable cls = autograd::expand(ctx, class_token_, Shape{n, 1, hidden});
  const Variable parts[] = {cls, seq};
  Variable y = encoder_->forward(ctx, autograd::concat(ctx, parts, 1));
  Variable first = autograd::reshape(ctx, autograd::narrow(ctx, y, 1, 0, 1), Shape{n, hidden});  // x[:, 0]
  return heads_->forward(ctx, first);
}

}  // namespace tandem::models
