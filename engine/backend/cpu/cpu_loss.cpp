// Softmax cross-entropy with label smoothing (numerically stable through log-sum-exp; the per-row
// arithmetic is loss_math.h, shared with the CUDA kernels) and inverted dropout: plain loops, one
// row or one element at a time.
#include <cmath>

#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/parallel.h"
#include "engine/backend/loss_math.h"

namespace tandem::backend::cpu {
namespace {

// Labels are data, not shapes: they are checked here, before any parallel loop, so a bad one
// is an error naming its row rather than a read past the end of a row.
void check_labels(const char* op, const Tensor& labels, int64_t classes, int64_t ignore_index) {
  const int64_t* l = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i) {
    if ((l[i] >= 0 && l[i] < classes) || l[i] == ignore_index) continue;
    const std::string ignored =
        ignore_index == kNoIgnoreIndex ? std::string() : fmt::format(" and is not ignore_index {}", ignore_index);
    throw_error(ErrorCode::kInvalidArgument, "{}: labels[{}] = {} is outside [0, {}) for logits with {} classes{}", op,
                i, l[i], classes, classes, ignored);
  }
}

float dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

}  // namespace

void accumulate_classification_stats(Ctx&, const Tensor& loss, float loss_scale, const Tensor& logits,
                                     const Tensor& labels, Tensor& stats) {
  int64_t rows = logits.dim(0), k = logits.dim(1);
  const float* z = logits.data<float>();
  const int64_t* l = labels.data<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < rows; ++i) {
    if (l[i] < 0 || l[i] >= k) continue;
    const float* row = z + i * k;
    const float target = row[l[i]];
    bool beaten = false;
    for (int64_t j = 0; j < k && !beaten; ++j) beaten = loss_math::logit_beats(row[j], target);
    correct += beaten ? 0 : 1;
  }
  float* s = stats.data<float>();
  s[0] += loss.data<float>()[0] * loss_scale;
  s[1] += static_cast<float>(correct);
  s[2] += static_cast<float>(rows);
}

void softmax_cross_entropy_forward(Ctx& ctx, const Tensor& logits, const Tensor& labels, float label_smoothing,
                                   int64_t ignore_index, Tensor& loss, Tensor& probs) {
  apply_thread_budget(ctx);
  int64_t rows = logits.dim(0), k = logits.dim(1);
  check_labels("softmax_cross_entropy_forward", labels, k, ignore_index);
  const float* z = logits.data<float>();
  const int64_t* l = labels.data<int64_t>();
  float* out = loss.data<float>();
  float* pr = probs.data<float>();
  // One pass for the log-sum-exp and the logit sum, one for the probabilities (loss_math.h, the
  // arithmetic the CUDA kernel shares).
#pragma omp parallel for schedule(static) if (rows * k >= kParallelGrain)
  for (int64_t i = 0; i < rows; ++i) {
    const float* zi = z + i * k;
    loss_math::LogSumExp acc = loss_math::lse_empty();
    double sz = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      acc = loss_math::lse_add(acc, zi[j]);
      sz += zi[j];
    }
    double lse = loss_math::lse_value(acc);
    for (int64_t j = 0; j < k; ++j) pr[i * k + j] = loss_math::softmax_prob(zi[j], lse);
    out[i] = l[i] == ignore_index ? 0.0f : loss_math::cross_entropy_loss(lse, zi[l[i]], sz, label_smoothing, k);
  }
}

void softmax_cross_entropy_backward(Ctx& ctx, const Tensor& probs, const Tensor& labels, float label_smoothing,
                                    int64_t ignore_index, const Tensor& dloss, Tensor& dlogits) {
  apply_thread_budget(ctx);
  int64_t rows = probs.dim(0), k = probs.dim(1);
  check_labels("softmax_cross_entropy_backward", labels, k, ignore_index);
  const float* pr = probs.data<float>();
  const int64_t* l = labels.data<int64_t>();
  const float* g = dloss.data<float>();
  float* dz = dlogits.data<float>();
  loss_math::SmoothedTarget t = loss_math::smoothed_target(label_smoothing, k);
#pragma omp parallel for schedule(static) if (rows * k >= kParallelGrain)
  for (int64_t i = 0; i < rows; ++i) {
    if (l[i] == ignore_index) {
      for (int64_t j = 0; j < k; ++j) dz[i * k + j] = 0.0f;
      continue;
    }
    for (int64_t j = 0; j < k; ++j) {
      dz[i * k + j] = loss_math::cross_entropy_grad(g[i], pr[i * k + j], loss_math::target_value(t, j, l[i]));
    }
  }
}

void softmax_cross_entropy_inplace(Ctx& ctx, Tensor& logits, const Tensor& labels, float label_smoothing,
                                   int64_t ignore_index, float scale, Tensor& loss) {
  apply_thread_budget(ctx);
  int64_t rows = logits.dim(0), k = logits.dim(1);
  check_labels("softmax_cross_entropy_inplace", labels, k, ignore_index);
  float* z = logits.data<float>();
  const int64_t* l = labels.data<int64_t>();
  float* out = loss.data<float>();
  const loss_math::SmoothedTarget t = loss_math::smoothed_target(label_smoothing, k);
  // The forward's arithmetic, then the backward's with dloss = scale, over each row while it is in
  // cache: the loss reads the label's logit before the row is overwritten.
#pragma omp parallel for schedule(static) if (rows * k >= kParallelGrain)
  for (int64_t i = 0; i < rows; ++i) {
    float* zi = z + i * k;
    if (l[i] == ignore_index) {
      out[i] = 0.0f;
      for (int64_t j = 0; j < k; ++j) zi[j] = 0.0f;
      continue;
    }
    loss_math::LogSumExp acc = loss_math::lse_empty();
    double sz = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      acc = loss_math::lse_add(acc, zi[j]);
      sz += zi[j];
    }
    const double lse = loss_math::lse_value(acc);
    out[i] = loss_math::cross_entropy_loss(lse, zi[l[i]], sz, label_smoothing, k);
    for (int64_t j = 0; j < k; ++j) {
      zi[j] = loss_math::cross_entropy_grad(scale, loss_math::softmax_prob(zi[j], lse),
                                            loss_math::target_value(t, j, l[i]));
    }
  }
}

void dropout_forward(Ctx& ctx, const Tensor& x, float p, Tensor& y, Tensor& mask) {
  apply_thread_budget(ctx);
  const float* px = x.data<float>();
  float* py = y.data<float>();
  uint8_t* m = mask.data<uint8_t>();
  Generator& gen = ctx.generator();
  // The mask is drawn serially: the generator's sequence is what makes a run repeat bitwise.
  for (int64_t i = 0; i < x.numel(); ++i) m[i] = p > 0.0f && gen.uniform() < p ? 0 : 1;
  float kept = dropout_scale(p);
  parallel_for(x.numel(), [=](int64_t i) { py[i] = m[i] != 0 ? px[i] * kept : 0.0f; });
}

void dropout_backward(Ctx& ctx, const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  apply_thread_budget(ctx);
  const float* g = dy.data<float>();
  const uint8_t* m = mask.data<uint8_t>();
  float* gx = dx.data<float>();
  float kept = dropout_scale(p);
  parallel_for(dy.numel(), [=](int64_t i) { gx[i] = m[i] != 0 ? g[i] * kept : 0.0f; });
}

}  // namespace tandem::backend::cpu
