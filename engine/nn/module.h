// Module: the unit a model is built from. It owns named parameters (trainable variables),
// buffers (state such as running statistics) and child modules, and exposes them as one flat
// name-to-tensor map with dotted names ("layer1.0.conv1.weight"), as torchvision's state_dict.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/variable.h"
#include "engine/core/context.h"

namespace tandem::nn {

using autograd::Variable;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // (N, ...) x -> the module's output. The context must outlive the recorded graph. A module whose
  // forward takes several inputs declares its own, as a libtorch module does:
  //   Variable forward(ExecutionContext& ctx, const Variable& x, const Variable& memory);
  // (with `using Module::forward;` beside it if the compiler warns that it hides this one), and its
  // owner calls that. This one-input forward, which operator(), Sequential and the Trainer call, is
  // then a FailedPrecondition naming the module's type.
  virtual Variable forward(ExecutionContext& ctx, const Variable& x);
  Variable operator()(ExecutionContext& ctx, const Variable& x) { return forward(ctx, x); }

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Recursive, in registration order, with dotted names. A parameter tied to another (one tensor
  // under two names, as GPT's lm_head.weight and transformer.wte.weight) appears once, under its
  // first name, as PyTorch's named_parameters() gives it; state_dict() has both names.
  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  std::vector<Variable> parameters() const;
  std::vector<std::pair<std::string, Tensor*>> named_buffers();
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }

  // Parameters and buffers by dotted name (values are shared, not copied).
  std::map<std::string, Tensor> state_dict();
  // Copies values in; strict: every name must match both ways, with equal shapes.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  void zero_grad();
  // Makes this module's parameter `name` the very variable `shared` (weight tying): one tensor, one
  // gradient, two names, for every handle to the parameter (Variable::tie_to), so the forward, the
  // optimizer and the checkpoint all see the one tensor. The parameter's own former value is freed.
  void tie_parameter(const std::string& name, const Variable& shared);
  // Moves every parameter and floating-point buffer to device (an explicit copy; gradients are
  // dropped). Integer buffers (counters such as num_batches_tracked) stay on the host.
  void to(Device device);

 protected:
  Variable& register_parameter(const std::string& name, Tensor value);
  Tensor& register_buffer(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    check_new_child(name, module != nullptr);
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void check_new_name(const std::string& name) const;
  void check_new_child(const std::string& name, bool constructed) const;
  void collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const;
  // Every name of every parameter, tied ones included.
  std::vector<std::pair<std::string, Variable>> all_named_parameters() const;
  void collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out);

  bool training_ = true;
  // unique_ptr: the references register_* hand out stay valid as more members are added.
  std::vector<std::pair<std::string, std::unique_ptr<Variable>>> parameters_;
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace tandem::nn
