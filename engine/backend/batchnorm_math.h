// The per-channel arithmetic of SyncBatchNorm's halves, shared by the CPU kernels
// (cpu/cpu_sync_batchnorm.cpp) and the CUDA ones (cuda/cuda_sync_batchnorm.cu), so the CPU tests
// prove the formulas the GPU runs. No engine header here: nvcc compiles it too.
#pragma once

#include <cmath>

#include "engine/backend/host_device.h"

namespace tandem::backend::bn_math {

// Per-channel moments of a set of values: their count, mean and M2 (sum of squared deviations).
struct Moments {
  double count = 0, mean = 0, m2 = 0;
};

// From the sums of x and x^2 over count values. M2 = sum x^2 - sum x * mean loses digits only when
// |mean| / std is above ~1e4; clamped at 0 against rounding.
TANDEM_HOST_DEVICE inline Moments moments_from_sums(double sum, double sum_squares, double count) {
  const double mean = count > 0 ? sum / count : 0.0;
  const double m2 = sum_squares - sum * mean;
  return {count, mean, m2 > 0.0 ? m2 : 0.0};
}

// Chan et al.'s pairwise update: the moments of a's and b's values together. Merging replicas in
// rank order on every replica gives bitwise equal results everywhere.
TANDEM_HOST_DEVICE inline Moments merge(Moments a, Moments b) {
  if (b.count == 0) return a;
  const double total = a.count + b.count;
  const double delta = b.mean - a.mean;
  return {total, a.mean + delta * b.count / total, a.m2 + b.m2 + delta * delta * a.count * b.count / total};
}

TANDEM_HOST_DEVICE inline double biased_var(const Moments& m) { return m.m2 / m.count; }

TANDEM_HOST_DEVICE inline float invstd(double var, float eps) {
  return static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
}

// running = (1 - momentum) running + momentum value, in double (value: the mean, or the unbiased
// variance var * count / (count - 1), as PyTorch keeps it).
TANDEM_HOST_DEVICE inline float running_update(float running, double value, float momentum) {
  return static_cast<float>((1.0 - momentum) * running + momentum * value);
}

// The gradient that reaches batch norm's output: dy, masked by y > 0 behind a fused ReLU.
TANDEM_HOST_DEVICE inline float grad_out(bool fuse_relu, float y, float dy) {
  return fuse_relu && y <= 0.0f ? 0.0f : dy;
}

// dx of one value from its channel's global sums: sum_g = sum of grad_out, sum_gx = sum of
// grad_out * xhat over every replica's values, inv_count = 1 / their count.
TANDEM_HOST_DEVICE inline float input_grad(float g, float xhat, float gamma, float inv_std, float sum_g, float sum_gx,
                                           float inv_count) {
  return gamma * inv_std * (g - sum_g * inv_count - xhat * sum_gx * inv_count);
}

}  // namespace tandem::backend::bn_math
