// nn.RMSNorm and nn.GroupNorm (autograd/composite.h's rms_norm and group_norm) with PyTorch's
// parameters, names and defaults.
#pragma once

#include <optional>

#include "engine/nn/module.h"

namespace tandem::nn {

class RMSNorm : public Module {
 public:
  // Over the last dimension of size normalized_shape; weight (ones) unless elementwise_affine is
  // false; eps as F.rms_norm's (the f32 machine epsilon when not given).
  explicit RMSNorm(int64_t normalized_shape, std::optional<float> eps = std::nullopt, bool elementwise_affine = true);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;

 private:
  int64_t normalized_shape_;
  std::optional<float> eps_;
  Variable weight_;
};

class GroupNorm : public Module {
 public:
  // num_channels divisible by num_groups; weight (ones) and bias (zeros) per channel when affine.
  GroupNorm(int64_t num_groups, int64_t num_channels, float eps = 1e-5f, bool affine = true);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;  // (N, C, ...) -> same shape

 private:
  int64_t groups_, channels_;
  float eps_;
  Variable weight_, bias_;
};

}  // namespace tandem::nn
