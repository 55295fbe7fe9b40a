// The factories' kernels on the CPU (contracts in kernels.h): plain loops over the flat storage,
// OpenMP-parallel above a grain, with factory_math.h's per-element values.
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/parallel.h"
#include "engine/backend/factory_math.h"

namespace tandem::backend::cpu {

void arange_fill(Ctx& ctx, double start, double step, Tensor& y) {
  apply_thread_budget(ctx);
  const int64_t n = y.numel();
  switch (y.dtype()) {
    case DType::kI64: {
      int64_t* py = y.data<int64_t>();
      const auto first = static_cast<int64_t>(start), delta = static_cast<int64_t>(step);
      parallel_for(n, [=](int64_t i) { py[i] = first + i * delta; });
      return;
    }
    case DType::kBF16: {
      BFloat16* py = y.data<BFloat16>();
      parallel_for(n, [=](int64_t i) { py[i] = float_to_bf16(static_cast<float>(arange_element(start, step, i))); });
      return;
    }
    default: {
      float* py = y.data<float>();
      parallel_for(n, [=](int64_t i) { py[i] = static_cast<float>(arange_element(start, step, i)); });
    }
  }
}

void random_fill(Ctx& ctx, const RandomFillParams& p, Tensor& y) {
  apply_thread_budget(ctx);
  float* py = y.data<float>();
  parallel_for(y.numel(), [=](int64_t i) { py[i] = random_element(p.seed, p.normal, p.a, p.b, i); });
}

}  // namespace tandem::backend::cpu
