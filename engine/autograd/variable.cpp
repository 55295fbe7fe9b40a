#include "engine/autograd/variable.h"

#include "engine/autograd/trace.h"

namespace tandem::autograd {
namespace {
thread_local bool grad_mode = true;
}  // namespace

Variable::Variable(Tensor value, bool requires_grad, std::string name) : data_(std::make_shared<VariableData>()) {
  data_->value = std::move(value);
  data_->requires_grad = requires_grad;
  data_->name = std::move(name);
}

void Variable::throw_empty() {
  throw_error(ErrorCode::kInvalidArgument,
              "an empty Variable was used: it was never given a value (a module member or child module "
              "left default-constructed, or a Variable declared and not assigned); construct it before the "
              "forward pass");
}

const Tensor& Variable::grad() const {
  const VariableData& d = held();
  TANDEM_CHECK(d.grad.defined(), ErrorCode::kFailedPrecondition,
               "variable '{}' ({}) has no gradient: it requires none, or backward has not reached it", d.name,
               d.value.describe());
  return d.grad;
}

void Variable::register_grad_ready_hook(std::function<void(Variable&)> hook) {
  TANDEM_CHECK(is_leaf() && requires_grad(), ErrorCode::kInvalidArgument,
               "grad-ready hooks go on leaves that require a gradient; '{}' is not one", held().name);
  held().grad_ready_hooks.push_back(std::move(hook));
}

void Variable::tie_to(const Variable& target) {
  VariableData& mine = held();
  const std::shared_ptr<VariableData>& theirs = target.root();
  TANDEM_CHECK(theirs != nullptr, ErrorCode::kInvalidArgument, "tie_to: the target variable is empty");
  if (&mine == theirs.get()) return;  // tied already
  TANDEM_CHECK(mine.grad_fn == nullptr && theirs->grad_fn == nullptr, ErrorCode::kInvalidArgument,
               "tie_to: only leaves (parameters) can be tied, not results of ops ('{}' to '{}')", mine.name,
               theirs->name);
  mine.tied_to = theirs;
  mine.value = Tensor();
  mine.grad = Tensor();
}

Variable make_op(std::string op, Tensor y, std::vector<Variable> inputs, BackwardFn backward,
                 BackwardAddingFn backward_adding) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    TANDEM_CHECK(inputs[i].defined(), ErrorCode::kInvalidArgument,
                 "op '{}': input {} is an empty Variable (never given a value: a module member or child "
                 "module left default-constructed?); construct it before the forward pass",
                 op, i);
  }
  if (tracing()) trace_op(op, inputs, y);
  bool needs_grad = false;
  if (grad_mode) {
    for (const Variable& in : inputs) needs_grad = needs_grad || in.requires_grad();
  }
  Variable out(std::move(y), needs_grad);
  if (needs_grad) {
    auto node = std::make_shared<Node>();
    node->op = std::move(op);
    node->input_versions.reserve(inputs.size());
    for (const Variable& in : inputs) node->input_versions.push_back(in.value().version());
    node->inputs = std::move(inputs);
    node->backward = std::move(backward);
    node->backward_adding = std::move(backward_adding);
    out.data_->grad_fn = std::move(node);
  }
  return out;
}

bool grad_enabled() { return grad_mode; }

NoGradGuard::NoGradGuard() : previous_(grad_mode) { grad_mode = false; }
NoGradGuard::~NoGradGuard() { grad_mode = previous_; }

double Variable::item() const {
  const Tensor& v = value();
  TANDEM_CHECK(v.numel() == 1, ErrorCode::kInvalidArgument,
               "item: a tensor with one element has a value; {} has {} (index or reduce it first)", v.describe(),
               v.numel());
  const Tensor host = v.to(Device::cpu()).to_format(MemoryFormat::kContiguous);
  switch (host.dtype()) {
    case DType::kF32: return host.data<float>()[0];
    case DType::kBF16: return bf16_to_float(host.data<BFloat16>()[0]);
    case DType::kF16: return half_to_float(host.data<Half>()[0]);
    case DType::kI32: return host.data<int32_t>()[0];
    case DType::kI64: return static_cast<double>(host.data<int64_t>()[0]);
    case DType::kU8: return host.data<uint8_t>()[0];
  }
  return 0.0;
}

}  // namespace tandem::autograd
