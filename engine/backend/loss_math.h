// The per-row arithmetic of softmax cross-entropy with label smoothing, shared by the CPU kernel
// (cpu_loss.cpp) and the CUDA kernels (cuda_loss.cu): the CPU tests prove the formulas, so on the
// GPU only the indexing around them is new. No CUDA header here: the CPU build includes it too.
//
// A row's log-sum-exp is kept as a running (max, sum of exp(z - max)) pair in double, so one pass
// over the row suffices and partial pairs (one per GPU lane) combine in any fixed order.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/backend/host_device.h"

namespace tandem::backend::loss_math {

struct LogSumExp {
  double max;  // the largest value seen, -inf when none (or only -inf) was seen
  double sum;  // sum of exp(value - max) over the values seen
};

TANDEM_HOST_DEVICE inline LogSumExp lse_empty() { return {-static_cast<double>(INFINITY), 0.0}; }

// Adds one value. -inf adds exp(-inf) = 0 and is skipped (so an all -inf row does not turn
// -inf - -inf into NaN early); NaN and +inf make the pair NaN, as they make the loss NaN.
TANDEM_HOST_DEVICE inline LogSumExp lse_add(LogSumExp a, float z) {
  double v = z;
  if (v == -static_cast<double>(INFINITY)) return a;
  if (v <= a.max) return {a.max, a.sum + ::exp(v - a.max)};
  return {v, a.sum * ::exp(a.max - v) + 1.0};  // also the NaN path: v <= max is false for NaN
}

// Merges two partial pairs. Bitwise symmetric in its arguments (IEEE + and * are commutative), so
// a butterfly exchange leaves every GPU lane with the same pair.
TANDEM_HOST_DEVICE inline LogSumExp lse_combine(LogSumExp a, LogSumExp b) {
  const double kNegInf = -static_cast<double>(INFINITY);
  if (b.max == kNegInf) return a;
  if (a.max == kNegInf) return b;
  if (a.max >= b.max) return {a.max, a.sum + b.sum * ::exp(b.max - a.max)};
  if (b.max > a.max) return {b.max, b.sum + a.sum * ::exp(a.max - b.max)};
  return {a.max + b.max, a.sum + b.sum};  // a NaN on either side stays NaN
}

TANDEM_HOST_DEVICE inline double lse_value(LogSumExp a) { return a.max + ::log(a.sum); }

// softmax_j = exp(z_j - lse), rounded to f32 once.
TANDEM_HOST_DEVICE inline float softmax_prob(float z, double lse) {
  return static_cast<float>(::exp(static_cast<double>(z) - lse));
}

// Labels are data: on the GPU they cannot be checked before the kernel, so the kernels test each.
TANDEM_HOST_DEVICE inline bool label_in_range(int64_t label, int64_t classes) {
  return label >= 0 && label < classes;
}

// Whether logit z keeps the label's logit `target` out of first place. Ties count for the label; a
// NaN on either side beats it, so a NaN prediction is never scored correct (a model gone NaN must
// not evaluate as 100%).
TANDEM_HOST_DEVICE inline bool logit_beats(float z, float target) { return !(z <= target); }

// -sum_j target_j log softmax_j with target = (1 - s) onehot(label) + s / K, which is
// lse - (1 - s) z_label - s / K sum_j z_j. The smoothing term is left out when s is 0, so a -inf
// logit elsewhere in the row does not make 0 * -inf = NaN.
TANDEM_HOST_DEVICE inline float cross_entropy_loss(double lse, float z_label, double sum_z, float smoothing,
                                                   int64_t classes) {
  double s = smoothing;
  double loss = lse - (1.0 - s) * static_cast<double>(z_label);
  if (s > 0.0) loss -= s / static_cast<double>(classes) * sum_z;
  return static_cast<float>(loss);
}

// The smoothed target distribution of one row: `on` at the label, `off` everywhere else.
struct SmoothedTarget {
  float on;
  float off;
};

TANDEM_HOST_DEVICE inline SmoothedTarget smoothed_target(float smoothing, int64_t classes) {
  float off = smoothing / static_cast<float>(classes);
  return {1.0f - smoothing + off, off};
}

TANDEM_HOST_DEVICE inline float target_value(SmoothedTarget t, int64_t j, int64_t label) {
  return j == label ? t.on : t.off;
}

// d loss / d z_j = dloss (softmax_j - target_j).
TANDEM_HOST_DEVICE inline float cross_entropy_grad(float dloss, float prob, float target) {
  return dloss * (prob - target);
}

}  // namespace tandem::backend::loss_math
