#include "engine/optim/optimizer.h"

#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "engine/backend/ops.h"
#include "engine/core/suggest.h"

namespace tandem::optim {

Optimizer::Optimizer(NamedParameters params, OptimizerOptions options, std::vector<std::string> state_names)
    : options_(std::move(options)), params_(std::move(params)), state_names_(std::move(state_names)) {
  TANDEM_CHECK(options_.lr >= 0.0f && options_.weight_decay >= 0.0f, ErrorCode::kInvalidArgument,
               "optimizer {}: lr {} and weight_decay {} must not be negative", options_.name, options_.lr,
               options_.weight_decay);
  // As PyTorch: "optimizer got an empty parameter list"; and one tensor given twice would be stepped twice.
  TANDEM_CHECK(!params_.empty(), ErrorCode::kInvalidArgument,
               "optimizer {}: the parameter list is empty, so a step would change nothing: pass the model's "
               "named_parameters() (are they all frozen, or the module not built yet?)",
               options_.name);
  std::unordered_map<const autograd::VariableData*, const std::string*> seen;
  for (const auto& [name, p] : params_) {
    TANDEM_CHECK(p.defined(), ErrorCode::kInvalidArgument, "optimizer {}: parameter '{}' is an empty Variable",
                 options_.name, name);
    auto [it, fresh] = seen.emplace(p.data(), &name);
    TANDEM_CHECK(fresh, ErrorCode::kInvalidArgument,
                 "optimizer {}: parameters '{}' and '{}' are one tensor (given twice, or tied): each step would update "
                 "it twice; pass each parameter once (Module::named_parameters() lists a tied one once)",
                 options_.name, *it->second, name);
  }
  Group decay{options_.weight_decay, {}}, no_decay{0.0f, {}};
  for (size_t i = 0; i < params_.size(); ++i) {
    bool skip = options_.exclude_norm_and_bias_from_weight_decay && params_[i].second.value().rank() <= 1;
    (skip ? no_decay : decay).members.push_back(i);
  }
  for (Group* g : {&decay, &no_decay}) {
    if (!g->members.empty()) groups_.push_back(std::move(*g));
  }
}

namespace {

// The bf16 shadow the update kernel can rewrite: one laid out as the parameter (a shadow made for a
// reshaped view is left to go stale and be rounded again by its next forward).
Tensor rewritable_shadow(const Tensor& w) {
  Tensor shadow = w.bf16_shadow();
  return shadow.defined() && shadow.shape() == w.shape() && shadow.format() == w.format() ? shadow : Tensor();
}

}  // namespace

void Optimizer::ensure_state() {
  if (!state_.empty() || state_names_.empty()) return;
  for (auto& [name, p] : params_) {
    std::vector<Tensor> per_param;
    for (size_t k = 0; k < state_names_.size(); ++k) {
      per_param.push_back(Tensor::zeros(p.shape(), DType::kF32, p.value().device(), p.value().format()));
    }
    state_.push_back(std::move(per_param));
  }
}

void Optimizer::step(ExecutionContext& ctx) {
  update_members(ctx, [](size_t) { return true; });
  finish_step();
}

void Optimizer::update_params(ExecutionContext& ctx, const std::vector<int>& indices) {
  std::vector<char>& chosen = chosen_scratch_;
  chosen.assign(params_.size(), 0);
  for (int i : indices) {
    TANDEM_CHECK(i >= 0 && static_cast<size_t>(i) < params_.size(), ErrorCode::kOutOfRange,
                 "optimizer update_params: parameter index {} of {}", i, params_.size());
    chosen[static_cast<size_t>(i)] = 1;
  }
  update_members(ctx, [&chosen](size_t i) { return chosen[i] != 0; });
}

void Optimizer::finish_step() { ++steps_; }

void Optimizer::update_members(ExecutionContext& ctx, const std::function<bool(size_t)>& chosen) {
  ensure_state();
  for (const Group& g : groups_) {
    std::vector<Tensor> w, dw, w16;
    std::vector<std::vector<Tensor>> state(state_names_.size());
    bool any_shadow = false;
    for (size_t i : g.members) {
      if (!chosen(i)) continue;
      auto& [name, p] = params_[i];
      TANDEM_CHECK(p.has_grad(), ErrorCode::kFailedPrecondition,
                   "optimizer step: parameter '{}' has no gradient; is it used in the loss?", name);
      w.push_back(p.value());
      dw.push_back(p.grad());
      for (size_t k = 0; k < state_names_.size(); ++k) state[k].push_back(state_[i][k]);
      w16.push_back(rewritable_shadow(p.value()));
      any_shadow = any_shadow || w16.back().defined();
    }
    if (!any_shadow) w16.clear();
    if (!w.empty()) update(ctx, g.weight_decay, w, dw, state, w16);
    for (size_t j = 0; j < w.size(); ++j) {
      w[j].bump_version();  // a graph recorded before this step can no longer backward
      if (any_shadow && w16[j].defined()) {
        w16[j].bump_version();
        w[j].set_bf16_shadow(w16[j]);  // rounded from the values just written: current
      }
    }
  }
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.zero_grad();
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < state_.size(); ++i) {
    for (size_t k = 0; k < state_names_.size(); ++k) out.emplace(params_[i].first + "." + state_names_[k], state_[i][k]);
  }
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state, int64_t steps_taken) {
  ensure_state();
  for (size_t i = 0; i < params_.size(); ++i) {
    for (size_t k = 0; k < state_names_.size(); ++k) {
      std::string key = params_[i].first + "." + state_names_[k];
      auto it = state.find(key);
      TANDEM_CHECK(it != state.end(), ErrorCode::kNotFound, "optimizer state '{}' is missing from the checkpoint",
                   key);
      TANDEM_CHECK(it->second.shape() == state_[i][k].shape(), ErrorCode::kInvalidArgument,
                   "optimizer state '{}' is {} in the checkpoint but the parameter needs {}", key,
                   it->second.describe(), state_[i][k].shape().str());
      state_[i][k].copy_from(it->second.to(state_[i][k].device()).to_format(state_[i][k].format()));
    }
  }
  steps_ = steps_taken;
}

Tensor clip_grad_norm(ExecutionContext& ctx, const NamedParameters& params, double max_norm, bool error_if_nonfinite) {
  TANDEM_CHECK(max_norm > 0.0, ErrorCode::kInvalidArgument, "clip_grad_norm: max_norm must be positive, got {}",
               max_norm);
  std::vector<Tensor> grads;
  for (const auto& [name, p] : params) {
    if (p.has_grad()) grads.push_back(p.grad());
  }
  Tensor squared = backend::squared_norm(ctx, grads);
  if (error_if_nonfinite) {
    const float value = squared.to(Device::cpu()).data<float>()[0];
    TANDEM_CHECK(std::isfinite(value), ErrorCode::kFailedPrecondition,
                 "clip_grad_norm: the total norm of the gradients of {} parameters is {}: a gradient holds NaN or "
                 "inf, so clipping cannot scale it (no gradient was changed)",
                 grads.size(), std::sqrt(value));
  }
  // In place (the handles share the gradients' storage), each storage once: two parameters may
  // hold one gradient tensor (autograd's add hands the same dy to both inputs).
  std::vector<Tensor> distinct;
  std::unordered_set<const void*> seen;
  for (const Tensor& g : grads) {
    if (seen.insert(g.raw_data()).second) distinct.push_back(g);
  }
  backend::clip_by_global_norm(ctx, distinct, squared, max_norm);
  return squared;
}

}  // namespace tandem::optim
