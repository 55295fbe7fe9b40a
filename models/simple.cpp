#include "models/simple.h"

namespace tandem::models {

std::shared_ptr<nn::Sequential> make_mlp(int64_t in_features, const std::vector<int64_t>& hidden,
                                         int64_t num_classes) {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Flatten>());
  int64_t width = in_features;
  for (int64_t h : hidden) {
    m->push_back(std::make_shared<nn::Linear>(width, h));
    m->push_back(std::make_shared<nn::ReLU>());
    width = h;
  }
  m->push_back(std::make_shared<nn::Linear>(width, num_classes));
  return m;
}

std::shared_ptr<nn::Sequential> make_small_cnn(int64_t in_channels, int64_t num_classes) {
  auto m = std::make_shared<nn::Sequential>();
  int64_t in = in_channels;
  for (int64_t out : {32, 64}) {
    m->push_back(std::make_shared<nn::Conv2d>(
        nn::Conv2dOptions{.in_channels = in, .out_channels = out, .kernel_size = 3, .padding = 1, .bias = false}));
    m->push_back(std::make_shared<nn::BatchNorm2d>(out, 1e-5f, 0.1f, /*fuse_relu=*/true));
    m->push_back(std::make_shared<nn::MaxPool2d>(2, 2));
    in = out;
  }
  m->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1));
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(in, num_classes));
  return m;
}

}  // namespace tandem::models
