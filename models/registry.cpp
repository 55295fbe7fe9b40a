#include "models/registry.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "engine/core/suggest.h"
#include "models/gpt.h"
#include "models/model_size.h"
#include "models/resnet.h"
#include "models/simple.h"
#include "models/vit.h"

namespace tandem::models {
namespace {

struct ImageNetDepth {
  std::vector<int> blocks;
  bool bottleneck;
};

const std::map<std::string, ImageNetDepth>& imagenet_resnets() {
  static const std::map<std::string, ImageNetDepth> table = {
      {"resnet18", {{2, 2, 2, 2}, false}},  {"resnet34", {{3, 4, 6, 3}, false}},
      {"resnet50", {{3, 4, 6, 3}, true}},   {"resnet101", {{3, 4, 23, 3}, true}},
      {"resnet152", {{3, 8, 36, 3}, true}},
  };
  return table;
}

const std::map<std::string, int>& cifar_resnets() {
  static const std::map<std::string, int> table = {
      {"resnet20", 20}, {"resnet32", 32}, {"resnet44", 44}, {"resnet56", 56}, {"resnet110", 110}};
  return table;
}

struct Registered {
  std::mutex mutex;
  std::map<std::string, ModelFactory> factories;
};

Registered& registered() {
  static Registered r;
  return r;
}

std::vector<std::string> built_in_names() {
  std::vector<std::string> names;
  for (const auto& [name, depth] : imagenet_resnets()) names.push_back(name);
  for (const auto& [name, depth] : cifar_resnets()) names.push_back(name);
  names.push_back("mlp");
  names.push_back("small_cnn");
  names.push_back("vit");
  names.push_back("gpt");
  return names;
}

// The registered factory of name, or an empty one.
ModelFactory registered_factory(const std::string& name) {
  Registered& r = registered();
  std::lock_guard lock(r.mutex);
  auto it = r.factories.find(name);
  return it == r.factories.end() ? ModelFactory() : it->second;
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names = built_in_names();
  Registered& r = registered();
  std::lock_guard lock(r.mutex);
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

void register_model(const std::string& name, ModelFactory factory) {
  TANDEM_CHECK(!name.empty() && factory != nullptr, ErrorCode::kInvalidArgument,
               "register_model: a model needs a name and a factory (got '{}'{})", name,
               factory == nullptr ? ", no factory" : "");
  const std::vector<std::string> built_in = built_in_names();
  TANDEM_CHECK(std::find(built_in.begin(), built_in.end(), name) == built_in.end(), ErrorCode::kInvalidArgument,
               "register_model: '{}' is a built-in model; register yours under another name", name);
  Registered& r = registered();
  std::lock_guard lock(r.mutex);
  TANDEM_CHECK(r.factories.emplace(name, std::move(factory)).second, ErrorCode::kInvalidArgument,
               "register_model: a model named '{}' is registered already", name);
}

std::shared_ptr<nn::Module> create_model(const ModelSpec& spec) {
  TANDEM_CHECK(spec.num_classes > 0 && spec.in_channels > 0 && spec.input_size > 0, ErrorCode::kInvalidArgument,
               "model '{}': num_classes {}, in_channels {} and input_size {} must be positive", spec.name,
               spec.num_classes, spec.in_channels, spec.input_size);
  check_model_fits(spec);  // before any allocation: a model that cannot fit is an error, not the OOM killer
  if (auto it = imagenet_resnets().find(spec.name); it != imagenet_resnets().end()) {
    TANDEM_CHECK(spec.input_size >= 32, ErrorCode::kInvalidArgument,
                 "model '{}' downsamples by 32: input_size {} is too small (use resnet20 for 28x28 or 32x32 inputs)",
                 spec.name, spec.input_size);
    return std::make_shared<ResNet>(it->second.blocks, it->second.bottleneck, spec.num_classes, spec.in_channels);
  }
  if (auto it = cifar_resnets().find(spec.name); it != cifar_resnets().end()) {
    return std::make_shared<CifarResNet>(it->second, spec.num_classes, spec.in_channels);
  }
  if (spec.name == "mlp") {
    return make_mlp(spec.in_channels * spec.input_size * spec.input_size, spec.hidden, spec.num_classes);
  }
  if (spec.name == "small_cnn") return make_small_cnn(spec.in_channels, spec.num_classes);
  if (spec.name == "vit") {
    return std::make_shared<Vit>(VitConfig{spec.input_size, spec.patch_size, spec.num_layers, spec.num_heads,
                                           spec.hidden_dim, spec.mlp_dim, spec.dropout, spec.attention_dropout,
                                           spec.num_classes, spec.in_channels});
  }
  if (spec.name == "gpt") {
    return std::make_shared<Gpt>(
        GptConfig{spec.block_size, spec.vocab_size, spec.n_layer, spec.n_head, spec.n_embd, spec.dropout, spec.bias});
  }
  if (ModelFactory factory = registered_factory(spec.name)) {
    std::shared_ptr<nn::Module> model = factory(spec);
    TANDEM_CHECK(model != nullptr, ErrorCode::kInvalidArgument, "the factory registered for model '{}' returned null",
                 spec.name);
    return model;
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown model '{}'{}; models: {}", spec.name,
              did_you_mean(spec.name, model_names()), fmt::join(model_names(), ", "));
}

}  // namespace tandem::models
