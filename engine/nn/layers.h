// The standard layers, with PyTorch's constructor arguments and parameter names, so a model
// written here has torchvision's state_dict names ("conv1.weight", "bn1.running_mean", ...).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/autograd/sync_batchnorm_op.h"
#include "engine/nn/module.h"

namespace tandem::nn {

struct Conv2dOptions {
  int64_t in_channels = 0, out_channels = 0;
  int64_t kernel_size = 3, stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& options);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;  // (N, C, H, W) -> (N, K, P, Q)
  Variable& weight() { return weight_; }
  // Under precision: bf16, on a device that keeps activations in bf16, training writes this layer's
  // output in bf16 (autograd::conv2d's bf16_output, rounded once from the f32 accumulation): for a
  // convolution whose output goes to a training batch norm alone, as a ResNet's do, so the tensor the
  // batch norm reads and keeps for its backward is half the size. Off by default; eval mode and a
  // layer with a bias stay f32.
  void keep_bf16_activations(bool on) { bf16_output_ = on; }

 private:
  autograd::Conv2dParams params_;
  Variable weight_, bias_;
  bool bf16_output_ = false;
};

class BatchNorm2d : public Module {
 public:
  // fuse_relu: return relu(bn(x)) in one kernel, as a BatchNorm followed by ReLU would.
  explicit BatchNorm2d(int64_t num_features, float eps = 1e-5f, float momentum = 0.1f, bool fuse_relu = false);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
  // relu(forward(x) + shortcut), a residual block's end, fused into batch norm's pass in training
  // where the backend can; for a layer made without fuse_relu.
  Variable forward_add_relu(ExecutionContext& ctx, const Variable& x, const Variable& shortcut);
  Variable& weight() { return weight_; }
  Variable& bias() { return bias_; }
  // SyncBatchNorm: with a reducer of more than one replica, training-mode statistics are those of
  // the global batch (see autograd/sync_batchnorm_op.h); null restores per-replica statistics.
  void set_replica_reducer(std::shared_ptr<autograd::ReplicaReducer> reducer) { reducer_ = std::move(reducer); }
  bool synchronized() const { return reducer_ != nullptr && reducer_->world_size() > 1; }
  // Under precision: bf16, on a device that keeps activations in bf16 (CPU and CUDA), training writes
  // this layer's output and its input's gradient in bf16 (backend::BatchNormParams::
  // bf16_activations): for a layer between convolutions, as a ResNet's are, whose input is a
  // convolution's output alone and whose output goes to convolutions, batch norms' shortcuts and
  // pooling. Off by default; SyncBatchNorm and eval mode stay f32.
  void keep_bf16_activations(bool on) { params_.bf16_activations = on; }

 private:
  void count_training_batch();

  autograd::BatchNormParams params_;
  Variable weight_, bias_;
  std::shared_ptr<autograd::ReplicaReducer> reducer_;
  Tensor* running_mean_;
  Tensor* running_var_;
  Tensor* num_batches_tracked_;  // i64 scalar, as PyTorch's buffer of that name
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;  // (N, in) -> (N, out)
  const Variable& weight() const { return weight_; }  // (out, in)
  const Variable& bias() const { return bias_; }      // (out), or undefined
  // Under precision: bf16, on a device that keeps activations in bf16, the output is stored in bf16
  // (autograd::linear's bf16_output): for a layer whose output goes to products alone that round
  // it anyway (a transformer's packed q, k, v projection). Off by default; the backward is unchanged.
  void keep_bf16_activations(bool on) { bf16_output_ = on; }

 private:
  Variable weight_, bias_;
  bool bf16_output_ = false;
};

class ReLU : public Module {
 public:
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
};

// nn.Sigmoid, nn.SiLU and nn.Tanh: no parameters.
class Sigmoid : public Module {
 public:
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
};

class SiLU : public Module {
 public:
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
};

class Tanh : public Module {
 public:
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
};

class MaxPool2d : public Module {
 public:
  MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding = 0);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;

 private:
  autograd::Pool2dParams params_;
};

class AvgPool2d : public Module {
 public:
  AvgPool2d(int64_t kernel_size, int64_t stride, int64_t padding = 0, bool count_include_pad = true);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;

 private:
  autograd::Pool2dParams params_;
};

// AdaptiveAvgPool2d with output size 1: (N, C, H, W) -> (N, C, 1, 1).
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(int64_t output_size = 1);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
};

class Flatten : public Module {
 public:
  Variable forward(ExecutionContext& ctx, const Variable& x) override;  // (N, ...) -> (N, rest)
};

class Dropout : public Module {
 public:
  explicit Dropout(float p = 0.5f);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;  // identity in eval mode

 private:
  float p_;
};

// Children named "0", "1", ... as torch.nn.Sequential names them, or by name as
// nn.Sequential(OrderedDict(...)) does.
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> module);
  void push_back(const std::string& name, std::shared_ptr<Module> module);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
  size_t size() const { return modules_.size(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace tandem::nn
