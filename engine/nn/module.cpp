#include "engine/nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <typeinfo>

namespace tandem::nn {
namespace {

std::string demangled(const char* name) {
  int status = 0;
  const std::unique_ptr<char, void (*)(void*)> readable(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                                         std::free);
  return status == 0 && readable ? readable.get() : name;
}

}  // namespace

Variable Module::forward(ExecutionContext&, const Variable&) {
  throw_error(ErrorCode::kFailedPrecondition,
              "{} has no one-input forward(ctx, x): a module whose forward takes several inputs is called by that "
              "forward (module.forward(ctx, x, memory)), not by operator(), Sequential or the Trainer",
              demangled(typeid(*this).name()));
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::check_new_name(const std::string& name) const {
  TANDEM_CHECK(!name.empty() && name.find('.') == std::string::npos, ErrorCode::kInvalidArgument,
               "module member name '{}' must be non-empty and contain no '.'", name);
  auto taken = [&](const auto& list) {
    for (const auto& entry : list) {
      if (entry.first == name) return true;
    }
    return false;
  };
  TANDEM_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), ErrorCode::kInvalidArgument,
               "module member name '{}' is registered twice", name);
}

void Module::check_new_child(const std::string& name, bool constructed) const {
  check_new_name(name);
  TANDEM_CHECK(constructed, ErrorCode::kInvalidArgument,
               "child module '{}' is null: construct it (std::make_shared<...>(...)) before registering it", name);
}

Variable& Module::register_parameter(const std::string& name, Tensor value) {
  check_new_name(name);
  parameters_.emplace_back(name, std::make_unique<Variable>(std::move(value), true, name));
  return *parameters_.back().second;
}

void Module::tie_parameter(const std::string& name, const Variable& shared) {
  for (auto& [own, p] : parameters_) {
    if (own != name) continue;
    TANDEM_CHECK(shared.defined() && shared.shape() == p->shape(), ErrorCode::kInvalidArgument,
                 "tie_parameter: '{}' is {} but the variable tied to it is {}", name, p->value().describe(),
                 shared.defined() ? shared.value().describe() : std::string("undefined"));
    // Through the variable itself, not only this slot: a layer that kept its own handle to the
    // parameter (Linear's weight_) reads the tied value in forward too.
    p->tie_to(shared);
    *p = shared;
    return;
  }
  throw_error(ErrorCode::kNotFound, "tie_parameter: this module has no parameter '{}'", name);
}

Tensor& Module::register_buffer(const std::string& name, Tensor value) {
  check_new_name(name);
  buffers_.emplace_back(name, std::make_unique<Tensor>(std::move(value)));
  return *buffers_.back().second;
}

void Module::collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out) const {
  for (const auto& [name, p] : parameters_) out.emplace_back(prefix + name, *p);
  for (const auto& [name, child] : children_) child->collect_parameters(prefix + name + ".", out);
}

void Module::collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) {
  for (auto& [name, b] : buffers_) out.emplace_back(prefix + name, b.get());
  for (auto& [name, child] : children_) child->collect_buffers(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Variable>> Module::all_named_parameters() const {
  std::vector<std::pair<std::string, Variable>> out;
  collect_parameters("", out);
  return out;
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Variable>> out;
  std::set<const autograd::VariableData*> seen;
  for (auto& entry : all_named_parameters()) {
    if (seen.insert(entry.second.data()).second) out.push_back(std::move(entry));
  }
  return out;
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  collect_buffers("", out);
  return out;
}

std::map<std::string, Tensor> Module::state_dict() {
  std::map<std::string, Tensor> out;
  for (auto& [name, p] : all_named_parameters()) out.emplace(name, p.value());
  for (auto& [name, b] : named_buffers()) out.emplace(name, *b);
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  std::set<std::string> used;
  auto load = [&](const std::string& name, Tensor& dst) {
    auto it = state.find(name);
    if (it == state.end()) {
      TANDEM_CHECK(!strict, ErrorCode::kNotFound, "load_state_dict: '{}' is missing from the state", name);
      return;
    }
    TANDEM_CHECK(it->second.shape() == dst.shape() && it->second.dtype() == dst.dtype(), ErrorCode::kInvalidArgument,
                 "load_state_dict: '{}' is {} in the state but {} in the module", name, it->second.describe(),
                 dst.describe());
    Tensor src = it->second.to(dst.device()).to_format(dst.format());
    dst.copy_from(src);
    used.insert(name);
  };
  for (auto& [name, p] : all_named_parameters()) load(name, p.value());
  for (auto& [name, b] : named_buffers()) load(name, *b);
  if (strict) {
    for (const auto& [name, t] : state) {
      TANDEM_CHECK(used.count(name) == 1, ErrorCode::kInvalidArgument,
                   "load_state_dict: '{}' ({}) is in the state but not in the module", name, t.describe());
    }
  }
}

void Module::zero_grad() {
  for (auto& [name, p] : named_parameters()) p.zero_grad();
}

void Module::to(Device device) {
  for (auto& [name, p] : named_parameters()) {
    p.value() = p.value().to(device);
    p.zero_grad();
  }
  // Integer buffers are counters (BatchNorm's num_batches_tracked) that the host advances each step:
  // they stay on the host, so counting needs no device kernel and no copy.
  for (auto& [name, b] : named_buffers()) {
    if (b->dtype() != DType::kI64) *b = b->to(device);
  }
}

}  // namespace tandem::nn
