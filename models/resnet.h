// ResNets with torchvision's architecture and state_dict names: ResNet-18/34 (BasicBlock) and
// ResNet-50/101/152 (Bottleneck, v1.5: the stride on the 3x3 convolution), and the CIFAR-style
// ResNet-20/32/44/56/110 of He et al. 2016 (three stages of 16, 32, 64 channels).
#pragma once

#include <memory>
#include <vector>

#include "engine/nn/layers.h"

namespace tandem::models {

using autograd::Variable;

class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Sequential> downsample_;  // null when the shapes already match
};

class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<nn::Sequential> downsample_;
};

// The ImageNet family (stem: 7x7 stride-2 convolution and 3x3 max pooling).
class ResNet : public nn::Module {
 public:
  // blocks: blocks per stage (4 stages of 64, 128, 256, 512 planes); bottleneck picks the block.
  ResNet(const std::vector<int>& blocks, bool bottleneck, int64_t num_classes, int64_t in_channels);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;  // (N, C, H, W) -> (N, classes)

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::MaxPool2d> maxpool_;
  std::vector<std::shared_ptr<nn::Sequential>> layers_;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<nn::Linear> fc_;
};

// The CIFAR family: 3x3 stem, three stages of (depth - 2) / 6 basic blocks. Shortcuts that change
// shape are 1x1 projections (the paper's option B), so every stage has torchvision-style names.
class CifarResNet : public nn::Module {
 public:
  CifarResNet(int depth, int64_t num_classes, int64_t in_channels);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::vector<std::shared_ptr<nn::Sequential>> layers_;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace tandem::models
