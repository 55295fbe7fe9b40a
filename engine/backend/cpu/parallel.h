// The loop helper of the plain-loop kernels: serial below a grain where a parallel region
// costs more than it saves, an OpenMP parallel loop (with the replica's thread budget) above;
// and what the hand-written kernels ask before they start: the thread budget, AVX-512.
#pragma once

#include <omp.h>

#include <cstdint>

#include "engine/backend/op_params.h"

namespace tandem::backend::cpu {

// The threads a kernel may use: the context's budget, or OpenMP's default where it sets none.
inline int thread_budget(const Ctx& ctx) { return ctx.num_threads() > 0 ? ctx.num_threads() : omp_get_max_threads(); }

// Whether this CPU (and its OS) runs AVX-512F, asked once.
inline bool cpu_has_avx512f() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

inline constexpr int64_t kParallelGrain = int64_t{1} << 15;

template <typename F>
void parallel_for(int64_t n, F f) {
  if (n < kParallelGrain) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace tandem::backend::cpu
