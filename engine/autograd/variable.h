// Variables of the autograd tape: a tensor value, its gradient, and (for results of ops) the
// recorded node that knows how to send a gradient back to the op's inputs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/context.h"
#include "engine/core/tensor.h"

namespace tandem::autograd {

class Variable;

// Given the gradient of an op's output, returns the gradient of each input, in the order the
// inputs were recorded; an undefined tensor means "no gradient for this input".
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& dy)>;

// The backward of an op that can add its gradient for its first input into `sum`, a tensor that
// already holds that input's other gradients (a residual fork's) and that nobody else sees, in the
// same pass that computes it. It returns the gradients as BackwardFn does, the first undefined.
using BackwardAddingFn = std::function<std::vector<Tensor>(const Tensor& dy, Tensor& sum)>;

struct Node {
  std::string op;                 // for error messages: "conv2d", "linear", ...
  std::vector<Variable> inputs;   // the op's inputs, held so the graph stays alive until backward
  // Each input value's Tensor::version() when the op ran: backward refuses an input written in place
  // since (an optimizer step or copy_from between forward and backward), as PyTorch's version
  // counters do, instead of computing gradients from values the forward never saw.
  std::vector<uint64_t> input_versions;
  BackwardFn backward;
  BackwardAddingFn backward_adding;  // optional
};

struct VariableData {
  Tensor value;
  Tensor grad;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves (parameters, inputs)
  bool graph_freed = false;       // a backward ran through this op's node and released it
  std::string name;               // set for parameters, used by hooks and error messages
  std::vector<std::function<void(class Variable&)>> grad_ready_hooks;
  // Set by Variable::tie_to: this parameter is now that one, for every handle to either.
  std::shared_ptr<VariableData> tied_to;
  // A backward pass is accumulating into this leaf's gradient: a second, concurrent one (another
  // thread through the same module) is refused rather than racing on it.
  std::atomic<bool> in_backward{false};
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor value, bool requires_grad = false, std::string name = {});

  // Every accessor below throws InvalidArgument on an empty Variable (a default-constructed
  // one: a module member never given a value), where it would otherwise dereference null.
  bool defined() const { return data_ != nullptr; }
  const Tensor& value() const { return held().value; }
  Tensor& value() { return held().value; }  // in-place updates (optimizers) go through this
  const Shape& shape() const { return held().value.shape(); }
  bool requires_grad() const { return data_ && root()->requires_grad; }
  bool is_leaf() const { return held().grad_fn == nullptr; }
  const std::string& name() const { return held().name; }

  bool has_grad() const { return held().grad.defined(); }
  const Tensor& grad() const;  // throws FailedPrecondition when there is none
  void set_grad(Tensor grad) { held().grad = std::move(grad); }
  void zero_grad() { held().grad = Tensor(); }

  // Runs backward from this scalar (one element) with seed gradient 1. Gradient sums run on
  // ctx (its device and stream); without one, on a context for the loss's device.
  void backward(ExecutionContext* ctx = nullptr);

  // hook(v) runs once per backward pass, on the backward thread, as soon as this leaf's
  // gradient for the pass is complete (no later op can add to it). Used to overlap all-reduce.
  void register_grad_ready_hook(std::function<void(Variable&)> hook);

  // The same value, cut from the graph: no gradient flows through it.
  Variable detach() const { return Variable(held().value, false); }
  // torch.Tensor.item(): a one-element tensor's value (any dtype; an i64 beyond 2^53 rounds),
  // copied to the host, so on a GPU it waits for the work that computes it. InvalidArgument otherwise.
  double item() const;

  VariableData* data() const { return root().get(); }
  const std::shared_ptr<VariableData>& shared_data() const { return root(); }
  bool same_as(const Variable& other) const { return root() == other.root(); }

  // Weight tying: from now on this variable is `target` (its value, gradient and hooks), through
  // this handle and every other handle to it, such as a layer's own copy. Its former value is freed.
  void tie_to(const Variable& target);

 private:
  // The data this handle stands for, following ties.
  const std::shared_ptr<VariableData>& root() const {
    const std::shared_ptr<VariableData>* d = &data_;
    while (*d != nullptr && (*d)->tied_to != nullptr) d = &(*d)->tied_to;
    return *d;
  }
  VariableData& held() const {
    if (data_ == nullptr) throw_empty();
    return *root();
  }
  [[noreturn]] static void throw_empty();

  friend Variable make_op(std::string, Tensor, std::vector<Variable>, BackwardFn, BackwardAddingFn);
  std::shared_ptr<VariableData> data_;
};

// Records an op: y computed from inputs, with its backward function. When grad mode is off or
// no input requires a gradient, y comes back as a plain value and nothing is recorded. This is
// also how a custom op with a hand-written backward joins the tape.
// backward_adding, when given, is used instead of backward where the first input's gradient has a
// sum waiting that it may add into.
Variable make_op(std::string op, Tensor y, std::vector<Variable> inputs, BackwardFn backward,
                 BackwardAddingFn backward_adding = {});

// Grad mode is per thread, so each replica thread controls its own.
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tandem::autograd
