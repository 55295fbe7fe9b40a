// Softmax cross-entropy with label smoothing, the training loop's classification statistics, and
// inverted dropout. The per-row arithmetic of the loss is loss_math.h, shared with the CPU kernel.
// Labels live on the device and are never read on the host: a label outside [0, K) makes that
// row's loss and gradient NaN (the trainer's loss check then reports it) and is never used as an
// index, unless it is ignore_index: that row's loss and gradient are 0.

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_reduce.cuh"
#include "engine/backend/cuda/cuda_xent_inplace.h"
#include "engine/backend/loss_math.h"

namespace tandem::backend::cuda {
namespace {

namespace lm = tandem::backend::loss_math;
using tandem::cuda::CudaContext;
using tandem::cuda::global_thread_index;
using tandem::cuda::grid_stride;
using tandem::cuda::kFullWarp;
using tandem::cuda::kWarpSize;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

// One warp per row: classification rows are short (K of 10 to a few thousand), so a warp keeps
// every lane busy without a block-wide barrier per row.
constexpr int kRowThreads = 256;
constexpr int kRowsPerBlock = kRowThreads / kWarpSize;
constexpr int64_t kMaxRowBlocks = 65535;

unsigned row_blocks(int64_t rows) {
  int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxRowBlocks ? kMaxRowBlocks : blocks));
}

__device__ __forceinline__ int64_t first_row() {
  return static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
}
__device__ __forceinline__ int64_t row_stride() { return static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarpSize); }

// Every lane folds its columns j = lane, lane + 32, ... into a (max, sum) pair and the logit sum;
// a butterfly exchange merges them. lse_combine and + are symmetric, so all lanes end with the
// same bits and the row's result does not depend on which lane writes it.
__global__ void softmax_xent_forward_kernel(const float* logits, const int64_t* labels, int64_t rows, int64_t k,
                                            float smoothing, int64_t ignore_index, float* loss, float* probs) {
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t row = first_row(); row < rows; row += row_stride()) {
    const float* z = logits + row * k;
    lm::LogSumExp acc = lm::lse_empty();
    double sum_z = 0.0;
    for (int64_t j = lane; j < k; j += kWarpSize) {
      const float v = z[j];
      acc = lm::lse_add(acc, v);
      sum_z += v;
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      lm::LogSumExp other{__shfl_xor_sync(kFullWarp, acc.max, offset), __shfl_xor_sync(kFullWarp, acc.sum, offset)};
      acc = lm::lse_combine(acc, other);
      sum_z += __shfl_xor_sync(kFullWarp, sum_z, offset);
    }
    const double lse = lm::lse_value(acc);
    float* p = probs + row * k;
    for (int64_t j = lane; j < k; j += kWarpSize) p[j] = lm::softmax_prob(z[j], lse);
    if (lane == 0) {
      const int64_t label = labels[row];
      loss[row] = label == ignore_index            ? 0.0f
                  : lm::label_in_range(label, k) ? lm::cross_entropy_loss(lse, z[label], sum_z, smoothing, k)
                                                 : NAN;
    }
  }
}

// Flat over the N x K gradient: each element needs only its row's label and dloss.
__global__ void softmax_xent_backward_kernel(const float* probs, const int64_t* labels, const float* dloss,
                                             int64_t rows, int64_t k, lm::SmoothedTarget target, int64_t ignore_index,
                                             float* dlogits) {
  const int64_t n = rows * k;
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const int64_t row = i / k;
    const int64_t j = i - row * k;
    const int64_t label = labels[row];
    dlogits[i] = label == ignore_index ? 0.0f
                 : lm::label_in_range(label, k)
                     ? lm::cross_entropy_grad(dloss[row], probs[i], lm::target_value(target, j, label))
                     : NAN;
  }
}

// One block: warp w tests rows w, w + 32, ...; a row is correct when its label is in range and no
// logit exceeds the label's (ties count for the label, NaN never exceeds). Counts are integers, so
// the sum is exact; one thread then updates the three running sums, hence no atomics.
constexpr int kStatsThreads = 1024;

__global__ void __launch_bounds__(kStatsThreads) classification_stats_kernel(const float* loss, float loss_scale, const float* logits,
                                            const int64_t* labels, int64_t rows, int64_t k, float* stats) {
  __shared__ unsigned long long scratch[kWarpSize];
  const int lane = threadIdx.x % kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  unsigned long long correct = 0;
  for (int64_t row = threadIdx.x / kWarpSize; row < rows; row += warps) {
    const int64_t label = labels[row];
    if (!lm::label_in_range(label, k)) continue;  // warp-uniform: every lane reads the same label
    const float* z = logits + row * k;
    const float target = z[label];
    bool beaten = false;
    for (int64_t j = lane; j < k && !beaten; j += kWarpSize) beaten = lm::logit_beats(z[j], target);
    correct += __any_sync(kFullWarp, beaten) ? 0 : 1;
  }
  correct = tandem::cuda::block_sum(lane == 0 ? correct : 0ull, scratch);
  if (threadIdx.x == 0) {
    stats[0] = __fadd_rn(stats[0], __fmul_rn(loss[0], loss_scale));
    stats[1] = __fadd_rn(stats[1], static_cast<float>(correct));
    stats[2] = __fadd_rn(stats[2], static_cast<float>(rows));
  }
}

// Dropout draws from Philox4x32-10 exactly as engine/core/random.cpp computes it: group g of four
// elements takes block g of Generator(seed, 0), the seed being drawn on the host from the context's
// generator. The mask thus depends on (seed, index) only, never on the launch geometry, and a test
// can recompute it on the host bit for bit.
constexpr uint32_t kPhiloxMul0 = 0xD2511F53u, kPhiloxMul1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxKey0 = 0x9E3779B9u, kPhiloxKey1 = 0xBB67AE85u;

__device__ __forceinline__ uint4 philox4x32_10(uint4 ctr, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(kPhiloxMul0, ctr.x), lo0 = kPhiloxMul0 * ctr.x;
    const uint32_t hi1 = __umulhi(kPhiloxMul1, ctr.z), lo1 = kPhiloxMul1 * ctr.z;
    ctr = make_uint4(hi1 ^ ctr.y ^ key0, lo1, hi0 ^ ctr.w ^ key1, lo0);
    key0 += kPhiloxKey0;
    key1 += kPhiloxKey1;
  }
  return ctr;
}

// Generator::uniform's mapping to [0, 1): the top 24 bits, exact in a float. An element is
// dropped when u < p, as on the CPU: p == 0 keeps every element and p == 1 drops every one.
__device__ __forceinline__ float uniform_from_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

__global__ void dropout_forward_kernel(const float* x, int64_t n, float p, float kept_scale, uint64_t seed, float* y,
                                       uint8_t* mask) {
  const int64_t groups = (n + 3) / 4;
  const uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  for (int64_t g = global_thread_index(); g < groups; g += grid_stride()) {
    const uint4 r = philox4x32_10(make_uint4(static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32), 0u, 0u),
                                  key0, key1);
    const uint32_t bits[4] = {r.x, r.y, r.z, r.w};
    for (int t = 0; t < 4; ++t) {
      const int64_t i = g * 4 + t;
      if (i >= n) break;
      const bool keep = !(uniform_from_bits(bits[t]) < p);
      mask[i] = keep ? 1 : 0;
      y[i] = keep ? __fmul_rn(x[i], kept_scale) : 0.0f;
    }
  }
}

__global__ void dropout_backward_kernel(const float* dy, const uint8_t* mask, int64_t n, float kept_scale,
                                        float* dx) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    dx[i] = mask[i] != 0 ? __fmul_rn(dy[i], kept_scale) : 0.0f;
  }
}

// The CPU backend's scale (cpu_loss.cpp), computed on the host the same way so results agree.
float dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

}  // namespace

void softmax_cross_entropy_forward(Ctx& ctx, const Tensor& logits, const Tensor& labels, float label_smoothing,
                                   int64_t ignore_index, Tensor& loss, Tensor& probs) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t rows = logits.dim(0), k = logits.dim(1);
  if (rows == 0) return;
  softmax_xent_forward_kernel<<<row_blocks(rows), kRowThreads, 0, cc.stream()>>>(
      logits.data<float>(), labels.data<int64_t>(), rows, k, label_smoothing, ignore_index, loss.data<float>(),
      probs.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("softmax_xent_forward_kernel", "op=softmax_cross_entropy_forward logits={} labels={} s={}",
                           logits.shape().str(), labels.shape().str(), label_smoothing);
}

void softmax_cross_entropy_backward(Ctx& ctx, const Tensor& probs, const Tensor& labels, float label_smoothing,
                                    int64_t ignore_index, const Tensor& dloss, Tensor& dlogits) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t rows = probs.dim(0), k = probs.dim(1);
  Launch l = launch_for(rows * k);
  softmax_xent_backward_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(
      probs.data<float>(), labels.data<int64_t>(), dloss.data<float>(), rows, k,
      lm::smoothed_target(label_smoothing, k), ignore_index, dlogits.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("softmax_xent_backward_kernel",
                           "op=softmax_cross_entropy_backward probs={} labels={} dloss={} s={}", probs.shape().str(),
                           labels.shape().str(), dloss.shape().str(), label_smoothing);
}

void softmax_cross_entropy_inplace(Ctx& ctx, Tensor& logits, const Tensor& labels, float label_smoothing,
                                   int64_t ignore_index, float scale, Tensor& loss) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  launch_softmax_xent_inplace({logits.data<float>(), labels.data<int64_t>(), logits.dim(0), logits.dim(1),
                               label_smoothing, ignore_index, scale, loss.data<float>()},
                              cc.stream());
}

void accumulate_classification_stats(Ctx& ctx, const Tensor& loss, float loss_scale, const Tensor& logits,
                                     const Tensor& labels, Tensor& stats) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t rows = logits.dim(0), k = logits.dim(1);
  classification_stats_kernel<<<1, kStatsThreads, 0, cc.stream()>>>(loss.data<float>(), loss_scale,
                                                                     logits.data<float>(), labels.data<int64_t>(),
                                                                     rows, k, stats.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("classification_stats_kernel", "op=accumulate_classification_stats logits={} labels={}",
                           logits.shape().str(), labels.shape().str());
}

void dropout_forward(Ctx& ctx, const Tensor& x, float p, Tensor& y, Tensor& mask) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t n = x.numel();
  // One draw per call (none for p == 0, like the CPU kernel), so runs repeat from the config seed.
  const uint64_t seed = p > 0.0f ? ctx.generator().next_u64() : 0;
  Launch l = launch_for((n + 3) / 4);
  dropout_forward_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(x.data<float>(), n, p, dropout_scale(p), seed,
                                                                   y.data<float>(), mask.data<uint8_t>());
  TANDEM_CUDA_LAUNCH_CHECK("dropout_forward_kernel", "op=dropout_forward x={} {} p={}", x.shape().str(),
                           memory_format_name(x.format()), p);
}

void dropout_backward(Ctx& ctx, const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t n = dy.numel();
  Launch l = launch_for(n);
  dropout_backward_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(dy.data<float>(), mask.data<uint8_t>(), n,
                                                                    dropout_scale(p), dx.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("dropout_backward_kernel", "op=dropout_backward dy={} {} p={}", dy.shape().str(),
                           memory_format_name(dy.format()), p);
}

}  // namespace tandem::backend::cuda
