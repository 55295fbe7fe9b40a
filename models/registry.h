// Models by name, as a config names them: resnet18/34/50/101/152, resnet20/32/44/56/110
// (CIFAR-style), mlp, small_cnn, vit (torchvision's VisionTransformer) and gpt (nanoGPT's GPT),
// and any a program registers (register_model), so that its
// YAML configs and the `trainer` verbs it runs (tools/cli.h) can name them. Input channels,
// input size and class count come from the config (1x28x28 and 10 classes for Fashion-MNIST).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/model_spec.h"
#include "engine/nn/module.h"

namespace tandem::models {

using ModelSpec = nn::ModelSpec;

// Every name create_model takes: the built-in ones, then the registered ones.
std::vector<std::string> model_names();

using ModelFactory = std::function<std::shared_ptr<nn::Module>(const ModelSpec&)>;

// Makes create_model (and so model.name in a config) build `name` with factory. The factory is
// called once per replica, each on its replica's thread. A name that is taken (built in, or
// registered before) is InvalidArgument. Safe to call from any thread.
void register_model(const std::string& name, ModelFactory factory);

// Registers at static initialisation: `static tandem::models::ModelRegistration r("textcnn", f);`
struct ModelRegistration {
  ModelRegistration(const std::string& name, ModelFactory factory) { register_model(name, std::move(factory)); }
};

// Throws InvalidArgument for an unknown name (with a "did you mean") or an impossible spec.
std::shared_ptr<nn::Module> create_model(const ModelSpec& spec);

}  // namespace tandem::models
