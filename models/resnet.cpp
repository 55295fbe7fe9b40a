#include "models/resnet.h"

#include <string>

namespace tandem::models {
namespace {

// Every convolution of a ResNet feeds a batch norm alone: under precision bf16 its output is kept in
// bf16 in training (nn::Conv2d::keep_bf16_activations), which the batch norm reads and keeps.
std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  auto layer = std::make_shared<nn::Conv2d>(nn::Conv2dOptions{
      .in_channels = in, .out_channels = out, .kernel_size = kernel, .stride = stride, .padding = padding, .bias = false});
  layer->keep_bf16_activations(true);
  return layer;
}

std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return conv(in, out, kernel, stride, kernel / 2);
}

// Every batch norm of a ResNet sits between convolutions: under precision bf16 its output and its
// input's gradient are kept in bf16 (nn::BatchNorm2d::keep_bf16_activations).
std::shared_ptr<nn::BatchNorm2d> bn(int64_t channels, bool fuse_relu) {
  auto layer = std::make_shared<nn::BatchNorm2d>(channels, 1e-5f, 0.1f, fuse_relu);
  layer->keep_bf16_activations(true);
  return layer;
}

// A 1x1 projection with BatchNorm when the block changes the shape, as torchvision's downsample.
std::shared_ptr<nn::Sequential> maybe_downsample(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return nullptr;
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{conv(in, out, 1, stride), bn(out, false)});
}


template <typename Block>
std::shared_ptr<nn::Sequential> make_stage(int64_t& in_planes, int64_t planes, int blocks, int64_t stride) {
  auto stage = std::make_shared<nn::Sequential>();
  for (int i = 0; i < blocks; ++i) {
    stage->push_back(std::make_shared<Block>(in_planes, planes, i == 0 ? stride : 1));
    in_planes = planes * Block::kExpansion;
  }
  return stage;
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride) {
  conv1_ = register_module("conv1", conv(in_planes, planes, 3, stride));
  bn1_ = register_module("bn1", bn(planes, true));
  conv2_ = register_module("conv2", conv(planes, planes, 3, 1));
  bn2_ = register_module("bn2", bn(planes, false));
  downsample_ = maybe_downsample(in_planes, planes * kExpansion, stride);
  if (downsample_) register_module("downsample", downsample_);
}

Variable BasicBlock::forward(ExecutionContext& ctx, const Variable& x) {
  Variable y = (*conv2_)(ctx, (*bn1_)(ctx, (*conv1_)(ctx, x)));
  Variable shortcut = downsample_ ? (*downsample_)(ctx, x) : x;
  return bn2_->forward_add_relu(ctx, y, shortcut);
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride) {
  conv1_ = register_module("conv1", conv(in_planes, planes, 1, 1));
  bn1_ = register_module("bn1", bn(planes, true));
  conv2_ = register_module("conv2", conv(planes, planes, 3, stride));
  bn2_ = register_module("bn2", bn(planes, true));
  conv3_ = register_module("conv3", conv(planes, planes * kExpansion, 1, 1));
  bn3_ = register_module("bn3", bn(planes * kExpansion, false));
  downsample_ = maybe_downsample(in_planes, planes * kExpansion, stride);
  if (downsample_) register_module("downsample", downsample_);
}

Variable Bottleneck::forward(ExecutionContext& ctx, const Variable& x) {
  Variable y = (*bn1_)(ctx, (*conv1_)(ctx, x));
  y = (*bn2_)(ctx, (*conv2_)(ctx, y));
  y = (*conv3_)(ctx, y);
  Variable shortcut = downsample_ ? (*downsample_)(ctx, x) : x;
  return bn3_->forward_add_relu(ctx, y, shortcut);
}

ResNet::ResNet(const std::vector<int>& blocks, bool bottleneck, int64_t num_classes, int64_t in_channels) {
  conv1_ = register_module("conv1", conv(in_channels, 64, 7, 2, 3));
  bn1_ = register_module("bn1", bn(64, true));
  maxpool_ = std::make_shared<nn::MaxPool2d>(3, 2, 1);
  int64_t in_planes = 64;
  const int64_t planes[] = {64, 128, 256, 512};
  for (size_t i = 0; i < 4; ++i) {
    int64_t stride = i == 0 ? 1 : 2;
    auto stage = bottleneck ? make_stage<Bottleneck>(in_planes, planes[i], blocks[i], stride)
                            : make_stage<BasicBlock>(in_planes, planes[i], blocks[i], stride);
    layers_.push_back(register_module("layer" + std::to_string(i + 1), stage));
  }
  avgpool_ = std::make_shared<nn::AdaptiveAvgPool2d>(1);
  fc_ = register_module("fc", std::make_shared<nn::Linear>(in_planes, num_classes));
}

Variable ResNet::forward(ExecutionContext& ctx, const Variable& x) {
  Variable y = (*maxpool_)(ctx, (*bn1_)(ctx, (*conv1_)(ctx, x)));
  for (auto& layer : layers_) y = (*layer)(ctx, y);
  return (*fc_)(ctx, autograd::flatten(ctx, (*avgpool_)(ctx, y)));
}

CifarResNet::CifarResNet(int depth, int64_t num_classes, int64_t in_channels) {
  TANDEM_CHECK(depth >= 8 && (depth - 2) % 6 == 0, ErrorCode::kInvalidArgument,
               "CIFAR ResNet depth must be 6n + 2 (20, 32, 44, 56, 110), got {}", depth);
  int blocks = (depth - 2) / 6;
  conv1_ = register_module("conv1", conv(in_channels, 16, 3, 1));
  bn1_ = register_module("bn1", bn(16, true));
  int64_t in_planes = 16;
  const int64_t planes[] = {16, 32, 64};
  for (size_t i = 0; i < 3; ++i) {
    layers_.push_back(register_module("layer" + std::to_string(i + 1),
                                      make_stage<BasicBlock>(in_planes, planes[i], blocks, i == 0 ? 1 : 2)));
  }
  avgpool_ = std::make_shared<nn::AdaptiveAvgPool2d>(1);
  fc_ = register_module("fc", std::make_shared<nn::Linear>(64, num_classes));
}

Variable CifarResNet::forward(ExecutionContext& ctx, const Variable& x) {
  Variable y = (*bn1_)(ctx, (*conv1_)(ctx, x));
  for (auto& layer : layers_) y = (*layer)(ctx, y);
  return (*fc_)(ctx, autograd::flatten(ctx, (*avgpool_)(ctx, y)));
}

}  // namespace tandem::models
