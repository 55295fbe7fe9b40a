// nn.Conv1d (autograd/composite.h's conv1d) with PyTorch's parameters, names and initialisation.
#pragma once

#include "engine/autograd/composite.h"
#include "engine/nn/module.h"

namespace tandem::nn {

struct Conv1dOptions {
  int64_t in_channels = 0, out_channels = 0;
  int64_t kernel_size = 3, stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

class Conv1d : public Module {
 public:
  // weight (out, in / groups, kernel) and bias (out) uniform in +-1 / sqrt(in / groups * kernel), as
  // PyTorch's reset_parameters.
  explicit Conv1d(const Conv1dOptions& options);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;  // (N, C, L) or (C, L)
  Variable& weight() { return weight_; }

 private:
  autograd::Conv1dParams params_;
  Variable weight_, bias_;
};

}  // namespace tandem::nn
