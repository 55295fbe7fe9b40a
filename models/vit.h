// ViT: torchvision's VisionTransformer, its layout and state_dict names (conv_proj, class_token,
// encoder.pos_embedding, encoder.layers.encoder_layer_N.{ln_1, self_attention, ln_2, mlp.0, mlp.3},
// encoder.ln, heads.head), so torchvision's model loads a Tandem checkpoint strictly. LayerNorm eps
// 1e-6, exact GELU; in_channels is ours (torchvision fixes 3: give its conv_proj the same).
#pragma once

#include <memory>
#include <vector>

#include "engine/nn/transformer_layers.h"

namespace tandem::models {

using autograd::Variable;

// torchvision.models.VisionTransformer's arguments, and the input's channels.
struct VitConfig {
  int64_t image_size = 224, patch_size = 16, num_layers = 12, num_heads = 12, hidden_dim = 768, mlp_dim = 3072;
  float dropout = 0.0f, attention_dropout = 0.0f;
  int64_t num_classes = 1000, in_channels = 3;
};

class VitEncoderBlock : public nn::Module {
 public:
  explicit VitEncoderBlock(const VitConfig& c);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;

 private:
  std::shared_ptr<nn::LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<nn::MultiheadAttention> self_attention_;
  std::shared_ptr<nn::Dropout> dropout_;
  std::shared_ptr<nn::Sequential> mlp_;
};

class Vit : public nn::Module {
 public:
  explicit Vit(const VitConfig& c);
  // (N, C, image_size, image_size) -> (N, num_classes)
  Variable forward(ExecutionContext& ctx, const Variable& x) override;

 private:
  VitConfig config_;
  std::shared_ptr<nn::Conv2d> conv_proj_;
  Variable class_token_;
  std::shared_ptr<nn::Module> encoder_;
  std::shared_ptr<nn::Sequential> heads_;
};

}  // namespace tandem::models
