// Fused optimizer updates on the CPU: one pass over each parameter's elements doing the whole
// update (weight decay, momentum or moments, step), so memory is read and written once. The
// per-element arithmetic lives in optim_math.h, shared with the CUDA kernels. A weight's bf16 shadow,
// where one is given, is rounded from each chunk of the updated weight while it is in cache.
#include "engine/backend/cpu/cpu_optim.h"

#include <algorithm>

#include "engine/backend/cpu/cpu_bf16.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/parallel.h"
#include "engine/backend/optim_math.h"

namespace tandem::backend::cpu {

namespace {

// The bf16 shadow of w[t] to write, or null.
uint16_t* shadow_of(const Tensor* w16, size_t t) {
  return w16 != nullptr && w16[t].defined() ? static_cast<uint16_t*>(w16[t].raw_data()) : nullptr;
}

// update(i) for every i in [0, n); with a shadow, each chunk of the updated w is rounded into it while
// the chunk is still in cache (round_to_bf16_serial: the bits of to_bf16, chunks being multiples of 16).
template <typename F>
void update_elements(int64_t n, const float* w, uint16_t* shadow, F update) {
  if (shadow == nullptr) return parallel_for(n, update);
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    for (int64_t i = begin; i < end; ++i) update(i);
    round_to_bf16_serial(w + begin, shadow + begin, end - begin);
  }
}

template <bool kMomentum, bool kFirstStep, bool kNesterov>
void sgd_tensors(const SgdStep& s, const Tensor* w, const Tensor* dw, const Tensor* v, const Tensor* w16,
                 size_t count) {
  for (size_t t = 0; t < count; ++t) {
    float* pw = w[t].data<float>();
    const float* g = dw[t].data<float>();
    float* buf = kMomentum ? v[t].data<float>() : nullptr;
    update_elements(w[t].numel(), pw, shadow_of(w16, t), [=](int64_t i) {
      // The buffer holds nothing before the first step: it is written, never read, then.
      float vi = kMomentum && !kFirstStep ? buf[i] : 0.0f;
      pw[i] = sgd_step_element<kMomentum, kFirstStep, kNesterov>(s, pw[i], g[i], vi);
      if constexpr (kMomentum) buf[i] = vi;
    });
  }
}

}  // namespace

void sgd_update(Ctx& ctx, const SgdParams& p, const Tensor* w, const Tensor* dw, const Tensor* v, const Tensor* w16,
                size_t count) {
  apply_thread_budget(ctx);
  const SgdStep s = sgd_step_for(p);
  if (!s.use_momentum) return sgd_tensors<false, false, false>(s, w, dw, v, w16, count);
  if (s.first_step) {
    return s.nesterov ? sgd_tensors<true, true, true>(s, w, dw, v, w16, count)
                      : sgd_tensors<true, true, false>(s, w, dw, v, w16, count);
  }
  return s.nesterov ? sgd_tensors<true, false, true>(s, w, dw, v, w16, count)
                    : sgd_tensors<true, false, false>(s, w, dw, v, w16, count);
}

void adamw_update(Ctx& ctx, const AdamWParams& p, const Tensor* w, const Tensor* dw, const Tensor* m,
                  const Tensor* v, const Tensor* w16, size_t count) {
  apply_thread_budget(ctx);
  const AdamWStep s = adamw_step_for(p);
  for (size_t k = 0; k < count; ++k) {
    float* pw = w[k].data<float>();
    const float* g = dw[k].data<float>();
    float* pm = m[k].data<float>();
    float* pv = v[k].data<float>();
    update_elements(w[k].numel(), pw, shadow_of(w16, k),
                    [=](int64_t i) { adamw_step_element(s, pw[i], g[i], pm[i], pv[i]); });
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

void clip_by_global_norm(Ctx& ctx, const Tensor* x, size_t count, const Tensor& squared_norm, double max_norm) {
  const float factor = clip_factor(squared_norm.data<float>()[0], max_norm);
  if (factor == 1.0f) return;
  apply_thread_budget(ctx);
  for (size_t k = 0; k < count; ++k) {
    float* px = x[k].data<float>();
    parallel_for(x[k].numel(), [=](int64_t i) { px[i] = factor * px[i]; });
  }
}

}  // namespace tandem::backend::cpu
