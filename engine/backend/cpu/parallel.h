// The loop helper of the plain-loop kernels: serial below a grain where a parallel region
// costs more than it saves, an OpenMP parallel loop (with the replica's thread budget) above.
#pragma once

#include <cstdint>

namespace tandem::backend::cpu {

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
