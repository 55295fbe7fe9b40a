// Optimizers over a model's named parameters: SGD (momentum, Nesterov) and AdamW, with weight
// decay that can skip BatchNorm and bias parameters, fused updates of all parameters at once,
// and state exposed by name for checkpoints ("<param>.momentum_buffer", "<param>.exp_avg", ...).
// A parameter with a bf16 shadow (Tensor::bf16_shadow, made by the first bf16 forward) gets it
// rewritten by the update kernel, so the next forward rounds no weight.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/variable.h"
#include "engine/backend/op_params.h"

namespace tandem::optim {

using NamedParameters = std::vector<std::pair<std::string, autograd::Variable>>;

struct OptimizerOptions {
  std::string name = "sgd";  // sgd | adamw
  float lr = 0.1f;
  float weight_decay = 0.0f;
  // Parameters of rank 1 (BatchNorm weights and biases, all biases) get no weight decay.
  bool exclude_norm_and_bias_from_weight_decay = false;
  // sgd
  float momentum = 0.9f;
  float dampening = 0.0f;
  bool nesterov = false;
  // adamw
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update from the parameters' gradients. A parameter without a gradient is an
  // error naming it (a layer left out of the loss), unless allow_missing_grads.
  void step(ExecutionContext& ctx);
  // The same step in parts, so a data-parallel replica can update the parameters of a gradient
  // bucket as soon as its reduction completes: update_params(ctx, indices) for each part (indices into
  // the parameters given, each exactly once per step), then finish_step(). step() is both at once.
  void update_params(ExecutionContext& ctx, const std::vector<int>& indices);
  void finish_step();
  void zero_grad();

  float lr() const { return options_.lr; }
  void set_lr(float lr) { options_.lr = lr; }
  int64_t steps_taken() const { return steps_; }
  const OptimizerOptions& options() const { return options_; }

  // Optimizer state by name, sharing storage (for checkpoints), and its restore.
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps_taken);

 protected:
  Optimizer(NamedParameters params, OptimizerOptions options, std::vector<std::string> state_names);
  // Updates one weight-decay group; state[k] holds the k-th state tensor of each parameter. w16:
  // empty, or per parameter its bf16 shadow to rewrite in the same kernel (or an undefined tensor).
  virtual void update(ExecutionContext& ctx, float weight_decay, const std::vector<Tensor>& w,
                      const std::vector<Tensor>& dw, const std::vector<std::vector<Tensor>>& state,
                      const std::vector<Tensor>& w16) = 0;

  OptimizerOptions options_;
  int64_t steps_ = 0;

 private:
  struct Group {
    float weight_decay;
    std::vector<size_t> members;  // indices into params_
  };
  void ensure_state();
  void update_members(ExecutionContext& ctx, const std::function<bool(size_t)>& chosen);

  NamedParameters params_;
  std::vector<std::string> state_names_;        // "momentum_buffer", or "exp_avg" and "exp_avg_sq"
  std::vector<std::vector<Tensor>> state_;      // [param][state name]
  std::vector<Group> groups_;
  std::vector<char> chosen_scratch_;  // update_params(indices)'s membership, sized once
};

// Builds the optimizer OptimizerOptions::name names; InvalidArgument (with "did you mean") otherwise.
std::unique_ptr<Optimizer> make_optimizer(NamedParameters params, const OptimizerOptions& options);

// Scales every gradient in place so their global L2 norm is at most max_norm (PyTorch's
// clip_grad_norm_), on the context's device and without reading anything back. Returns the sum of
// squares of the gradients before clipping: [] f32 on the device (its square root is the norm).
// error_if_nonfinite (PyTorch's argument of that name): read the norm back first and throw
// FailedPrecondition, leaving every gradient as it was, when it is NaN or infinite; without it
// nothing is read and a NaN gradient goes on to the update (the Trainer's NaN guard over the
// parameters then stops the run at its next log line or checkpoint).
Tensor clip_grad_norm(ExecutionContext& ctx, const NamedParameters& params, double max_norm,
                      bool error_if_nonfinite = false);

}  // namespace tandem::optim
