// Training batch norm with bf16 activations (BatchNormParams::bf16_activations
// under precision: bf16): y and dx stored in bf16, a bf16 shortcut read,
// statistics and parameter gradients f32.
//
// cuDNN's batch norm takes x and y of one type, and our x is a convolution's
// f32 or bf16 output (x, y, dy and dx are not all one type), so these go
// through our own kernels: the statistics are
// SyncBatchNorm's halves with one replica (batchnorm_moments, then
// batchnorm_merge_moments over that one row: the batch mean, the biased
// variance for invstd, the running averages with the unbiased one, as cuDNN
// keeps them), then one pass writes y = bf16(relu(xhat gamma + beta (+
// shortcut))). The backward is batchnorm_backward_reduce and
// batchnorm_backward_elemt with the whole batch as the count, reading a bf16 y
// for the ReLU's mask and writing a bf16 dx. Per-channel sums are taken in
// double in an order fixed by the shape, so a step repeats bit for bit.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/cuda_bf16_access.cuh"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_reduce.cuh"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::global_thread_index;
using tandem::cuda::grid_stride;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

template <typename Y, typename S>
struct ApplyArgs {
  F32OrBf16 x;
  const float *gamma, *beta, *mean, *invstd;
  const S* shortcut;  // null: no residual sum
  Y* y;
  int64_t n, channels, hw;
  bool channels_last, relu;
};

template <typename Y, typename S>
__global__ void apply_kernel(ApplyArgs<Y, S> a) {
  for (int64_t i = global_thread_index(); i < a.n; i += grid_stride()) {
    const int64_t c = a.channels_last ? i % a.channels : (i / a.hw) % a.channels;
    const float xhat = __fmul_rn(__fsub_rn(a.x[i], a.mean[c]), a.invstd[c]);
    float v = __fadd_rn(__fmul_rn(xhat, a.gamma[c]), a.beta[c]);
    if (a.shortcut != nullptr) v = __fadd_rn(v, widen(a.shortcut[i]));
    if (a.relu && v < 0.0f) v = 0.0f;  // `v < 0` is false for NaN: a NaN reaches the loss
    store(a.y + i, v);
  }
}

template <typename Y, typename S>
void apply(CudaContext& cc, const Tensor& x, const Tensor& gamma, const Tensor& beta, const BatchNormSaved& saved,
           const Tensor* shortcut, bool relu, Tensor& y) {
  const ApplyArgs<Y, S> args{{x.raw_data(), x.dtype() == DType::kBF16},
                             gamma.data<float>(),
                             beta.data<float>(),
                             saved.mean.data<float>(),
                             saved.invstd.data<float>(),
                             shortcut != nullptr ? static_cast<const S*>(shortcut->raw_data()) : nullptr,
                             static_cast<Y*>(y.raw_data()),
                             x.numel(),
                             x.dim(1),
                             x.dim(2) * x.dim(3),
                             x.format() == MemoryFormat::kChannelsLast,
                             relu};
  const Launch l = launch_for(args.n);
  apply_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(args);
  TANDEM_CUDA_LAUNCH_CHECK("apply_kernel",
                           "op=batchnorm_forward_training (bf16 activations) x={} {} {} y={} "
                           "shortcut={}",
                           x.shape().str(), dtype_name(x.dtype()), memory_format_name(x.format()), dtype_name(y.dtype()),
                           shortcut != nullptr ? dtype_name(shortcut->dtype()) : "none");
}

bool is_bf16(const Tensor& t) { return t.dtype() == DType::kBF16; }

Tensor scratch(const Ctx& ctx, int64_t n) { return Tensor::empty({n}, DType::kF32, ctx.device()); }

}  // namespace

void batchnorm_forward_training_bf16(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                     const Tensor& beta, const Tensor* shortcut, Tensor& running_mean,
                                     Tensor& running_var, Tensor& y, BatchNormSaved& saved) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  saved.workspace = Tensor();  // no cuDNN reserve space: the backward takes
                               // batchnorm_backward_bf16
  const int64_t channels = x.dim(1);
  Tensor moments = scratch(ctx, 2 * channels + 1), var = scratch(ctx, channels), count = scratch(ctx, 1);
  batchnorm_moments(ctx, x, moments);
  batchnorm_merge_moments(ctx, p, moments, running_mean, running_var, saved.mean, var, saved.invstd, count);
  using B = __nv_bfloat16;
  const bool bf16_shortcut = shortcut != nullptr && is_bf16(*shortcut);
  if (is_bf16(y) && bf16_shortcut) return apply<B, B>(cc, x, gamma, beta, saved, shortcut, p.fuse_relu, y);
  if (is_bf16(y)) return apply<B, float>(cc, x, gamma, beta, saved, shortcut, p.fuse_relu, y);
  if (bf16_shortcut) return apply<float, B>(cc, x, gamma, beta, saved, shortcut, p.fuse_relu, y);
  apply<float, float>(cc, x, gamma, beta, saved, shortcut, p.fuse_relu, y);
}

void batchnorm_backward_bf16(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                             const Tensor& gamma, const BatchNormSaved& saved, Tensor& dx, Tensor& dgamma,
                             Tensor& dbeta) {
  const int64_t channels = x.dim(1);
  Tensor sums = scratch(ctx, 2 * channels), count = scratch(ctx, 1);
  fill(ctx, static_cast<float>(x.numel() / channels), count);
  batchnorm_backward_reduce(ctx, p, x, y, dy, saved.mean, saved.invstd, sums, dgamma, dbeta);
  batchnorm_backward_elemt(ctx, p, x, y, dy, gamma, saved.mean, saved.invstd, sums, count, dx);
}

}  // namespace tandem::backend::cuda
