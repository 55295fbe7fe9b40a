// Fused optimizer updates on the CPU: one pass over each parameter's elements doing the whole
// update (weight decay, momentum or moments, step), so memory is read and written once.
#include <cmath>

#include "engine/backend/cpu/cpu_optim.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/parallel.h"

namespace tandem::backend::cpu {

void sgd_update(Ctx& ctx, const SgdParams& p, const Tensor* w, const Tensor* dw, const Tensor* v, size_t count) {
  apply_thread_budget(ctx);
  for (size_t t = 0; t < count; ++t) {
    float* pw = w[t].data<float>();
    const float* g = dw[t].data<float>();
    float* buf = p.momentum != 0.0f ? v[t].data<float>() : nullptr;
    const SgdParams q = p;
    parallel_for(w[t].numel(), [=](int64_t i) {
      float d = g[i] + q.weight_decay * pw[i];
      if (buf != nullptr) {
        buf[i] = q.first_step ? d : q.momentum * buf[i] + (1.0f - q.dampening) * d;
        d = q.nesterov ? d + q.momentum * buf[i] : buf[i];
      }
      pw[i] -= q.lr * d;
    });
  }
}

void adamw_update(Ctx& ctx, const AdamWParams& p, const Tensor* w, const Tensor* dw, const Tensor* m,
                  const Tensor* v, size_t count) {
  apply_thread_budget(ctx);
  const double t = static_cast<double>(p.step);
  const float correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta1), t));
  const float correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(p.beta2), t));
  const float step_size = p.lr / correction1;
  const float sqrt_c2 = std::sqrt(correction2);
  for (size_t k = 0; k < count; ++k) {
    float* pw = w[k].data<float>();
    const float* g = dw[k].data<float>();
    float* pm = m[k].data<float>();
    float* pv = v[k].data<float>();
    const AdamWParams q = p;
    parallel_for(w[k].numel(), [=](int64_t i) {
      pw[i] *= 1.0f - q.lr * q.weight_decay;
      pm[i] = q.beta1 * pm[i] + (1.0f - q.beta1) * g[i];
      pv[i] = q.beta2 * pv[i] + (1.0f - q.beta2) * g[i] * g[i];
      pw[i] -= step_size * pm[i] / (std::sqrt(pv[i]) / sqrt_c2 + q.eps);
    });
  }
}

void squared_norm(Ctx& ctx, const Tensor* x, size_t count, Tensor& y) {
  apply_thread_budget(ctx);
  double total = 0.0;
  for (size_t k = 0; k < count; ++k) {
    const float* px = x[k].data<float>();
    const int64_t n = x[k].numel();
    double part = 0.0;
#pragma omp parallel for reduction(+ : part) schedule(static) if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) part += static_cast<double>(px[i]) * px[i];
    total += part;
  }
  y.data<float>()[0] = static_cast<float>(total);
}

}  // namespace tandem::backend::cpu
