// Models by name, as a config names them: resnet18/34/50/101/152, resnet20/32/44/56/110
// (CIFAR-style), mlp and small_cnn. Input channels, input size and class count come from
// the config (1x28x28 and 10 classes for Fashion-MNIST).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"

namespace tandem::models {

struct ModelSpec {
  std::string name;
  int64_t num_classes = 10;
  int64_t in_channels = 3;
  int64_t input_size = 32;              // height = width of the input images
  std::vector<int64_t> hidden = {256};  // mlp only: hidden layer widths
};

std::vector<std::string> model_names();

// Throws InvalidArgument for an unknown name (with a "did you mean") or an impossible spec.
std::shared_ptr<nn::Module> create_model(const ModelSpec& spec);

}  // namespace tandem::models
