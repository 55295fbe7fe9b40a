// What a config's `model:` section says: the registry's name of the architecture and its
// hyperparameters. One struct for the trainer's config (train::ModelConfig) and the model registry
// (models::ModelSpec), so every YAML key is one field; docs/CONFIG.md and docs/TRANSFORMERS.md
// document each. Fields of one family are ignored by the others (the config refuses them there).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::nn {

struct ModelSpec {
  std::string name = "resnet20";
  int64_t num_classes = 10;
  int64_t in_channels = 3;
  int64_t input_size = 32;              // height = width of the input images (vit: image_size)
  std::vector<int64_t> hidden = {256};  // mlp only: hidden layer widths
  bool channels_last = false;           // NHWC activations (faster with oneDNN and tensor cores)

  // vit: torchvision's VisionTransformer arguments (image_size is input_size).
  int64_t patch_size = 16, num_layers = 12, num_heads = 12, hidden_dim = 768, mlp_dim = 3072;
  float attention_dropout = 0.0f;

  // gpt: nanoGPT's GPTConfig.
  int64_t block_size = 1024, vocab_size = 50304, n_layer = 12, n_head = 12, n_embd = 768;
  bool bias = true;

  float dropout = 0.0f;  // vit and gpt
};

}  // namespace tandem::nn
