// The per-element arithmetic of the optimizer updates, shared by the CPU kernels (cpu_optim.cpp)
// and the CUDA ones (cuda/cuda_optim.cu), so the CPU tests prove the formulas the GPU runs and
// only the GPU's indexing is left to its own tests. The formulas are PyTorch's (see SgdParams and
// AdamWParams in kernels.h). nvcc compiles this header, so it includes no engine header: the
// step-from-params helpers are templates over the params type for that reason.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/backend/host_device.h"

namespace tandem::backend {

// The scalars of one SGD step; use_momentum is momentum != 0 (no buffer is read or written otherwise).
struct SgdStep {
  float lr;
  float momentum;
  float dampening;
  float weight_decay;
  bool nesterov;
  bool first_step;
  bool use_momentum;
};

template <typename Params>  // SgdParams
inline SgdStep sgd_step_for(const Params& p) {
  return {p.lr, p.momentum, p.dampening, p.weight_decay, p.nesterov, p.first_step, p.momentum != 0.0f};
}

// One element of PyTorch's SGD: returns the new weight; v is the momentum buffer's element, read
// only when it holds something (not on the first step) and written when momentum is in use.
// The flags as template arguments: the CPU loop then has no branch and vectorises.
template <bool kMomentum, bool kFirstStep, bool kNesterov>
TANDEM_HOST_DEVICE inline float sgd_step_element(const SgdStep& s, float w, float g, float& v) {
  float d = g + s.weight_decay * w;
  if constexpr (kMomentum) {
    v = kFirstStep ? d : s.momentum * v + (1.0f - s.dampening) * d;
    d = kNesterov ? d + s.momentum * v : v;
  }
  return w - s.lr * d;
}

// The same with the flags read from s (the same arithmetic).
TANDEM_HOST_DEVICE inline float sgd_step_element(const SgdStep& s, float w, float g, float& v) {
  float d = g + s.weight_decay * w;
  if (s.use_momentum) {
    v = s.first_step ? d : s.momentum * v + (1.0f - s.dampening) * d;
    d = s.nesterov ? d + s.momentum * v : v;
  }
  return w - s.lr * d;
}

// The scalars of one AdamW step, bias corrections folded in once on the host.
struct AdamWStep {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  float step_size;  // lr / (1 - beta1^step)
  float sqrt_c2;    // sqrt(1 - beta2^step)
};

// The corrections are computed in double so that large step counts lose nothing before rounding.
template <typename Params>  // AdamWParams
inline AdamWStep adamw_step_for(const Params& p) {
  const double t = static_cast<double>(p.step);
  const float correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), t));
  const float correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), t));
  return {p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.lr / correction1, std::sqrt(correction2)};
}

// One element of PyTorch's AdamW (decoupled weight decay first, then the moment update and step).
TANDEM_HOST_DEVICE inline void adamw_step_element(const AdamWStep& s, float& w, float g, float& m, float& v) {
  w *= 1.0f - s.lr * s.weight_decay;
  m = s.beta1 * m + (1.0f - s.beta1) * g;
  v = s.beta2 * v + (1.0f - s.beta2) * g * g;
  w -= s.step_size * m / (std::sqrt(v) / s.sqrt_c2 + s.eps);
}

// PyTorch's clip_grad_norm_: the gradients scale by max_norm / (norm + 1e-6) when their global
// norm exceeds max_norm, else stay as they are (factor 1). squared_norm is squared_norm's output.
TANDEM_HOST_DEVICE inline float clip_factor(float squared_norm, double max_norm) {
  const double norm = std::sqrt(static_cast<double>(squared_norm));
  return norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
}

}  // namespace tandem::backend
