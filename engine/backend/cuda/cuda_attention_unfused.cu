// The unfused attention path on the GPU: the score matrices of every head as cuBLAS batched
// products, a warp per row for the masked softmax (and its log-sum-exp) and for the softmax's
// backward, then batched products again. It keeps (B * H, Tq, Tk) scores, so it serves head sizes
// the tiled kernels do not take, and the gpu tests hold the tiled kernels to it.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "engine/backend/cuda/cuda_attention_common.cuh"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_reduce.cuh"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::kFullWarp;
using tandem::cuda::kWarpSize;

constexpr int kThreads = 256;

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

// In place over raw = q k^T (heads * tq rows of tk): the dropped probabilities, and each row's lse.
__global__ void forward_rows_kernel(AttnLayout a, float* raw, float* lse) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t rows = a.heads * a.tq;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarpSize;
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize; row < rows;
       row += warps) {
    const int64_t bh = row / a.tq, i = row % a.tq;
    float* s = raw + row * a.tk;
    float m = -INFINITY;
    for (int64_t j = lane; j < a.tk; j += kWarpSize) {
      s[j] = attn_score(a, bh, i, j, s[j]);
      m = fmaxf(m, s[j]);
    }
    m = warp_max(m);
    float sum = 0.0f;
    for (int64_t j = lane; j < a.tk; j += kWarpSize) sum += m == -INFINITY ? 0.0f : expf(s[j] - m);
    sum = warp_sum(sum);
    for (int64_t j = lane; j < a.tk; j += kWarpSize) {
      const float p = sum > 0.0f ? expf(s[j] - m) / sum : 0.0f;
      s[j] = p * attn_dropout(a, bh, i, j);
    }
    if (lane == 0) lse[row] = sum > 0.0f ? m + logf(sum) : -INFINITY;
  }
}

// From raw = q k^T: p (in raw's place) and the dropped p (into dropped).
__global__ void backward_probs_kernel(AttnLayout a, float* raw, float* dropped, const float* lse) {
  const int64_t n = a.heads * a.tq * a.tk;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / a.tk, j = e % a.tk, bh = row / a.tq, i = row % a.tq;
    const float score = attn_score(a, bh, i, j, raw[e]);
    const float p = score == -INFINITY || lse[row] == -INFINITY ? 0.0f : expf(score - lse[row]);
    raw[e] = p;
    dropped[e] = p * attn_dropout(a, bh, i, j);
  }
}

// In place over dp (the gradient of the dropped p): ds = p (dp z - delta) scale.
__global__ void backward_scores_kernel(AttnLayout a, const float* p, float* dp, const float* delta) {
  const int64_t n = a.heads * a.tq * a.tk;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / a.tk, j = e % a.tk, bh = row / a.tq, i = row % a.tq;
    dp[e] = p[e] * (dp[e] * attn_dropout(a, bh, i, j) - delta[row]) * a.scale;
  }
}

unsigned blocks_for(int64_t threads) {
  int64_t blocks = (threads + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

Tensor heads_view(const Tensor& t) { return t.reshape({t.dim(0) * t.dim(1), t.dim(2), t.dim(3)}); }

}  // namespace

void attention_forward_unfused(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& mask, Tensor& y, Tensor& lse) {
  const AttnLayout a = attn_layout(p, q, k, v, mask);
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  Tensor scores = Tensor::empty({a.heads, a.tq, a.tk}, DType::kF32, ctx.device());
  batched_matmul(ctx, heads_view(q), heads_view(k), false, true, scores);
  forward_rows_kernel<<<blocks_for(a.heads * a.tq * kWarpSize), kThreads, 0, cc.stream()>>>(a, scores.data<float>(),
                                                                                           lse.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("forward_rows_kernel", "q={} k={}", q.shape().str(), k.shape().str());
  Tensor y3 = heads_view(y);
  batched_matmul(ctx, scores, heads_view(v), false, false, y3);
}

void attention_backward_unfused(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor& mask, const Tensor& y, const Tensor& lse,
                                const Tensor& dy, Tensor& dq, Tensor& dk, Tensor& dv) {
  const AttnLayout a = attn_layout(p, q, k, v, mask);
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  Tensor probs = Tensor::empty({a.heads, a.tq, a.tk}, DType::kF32, ctx.device());
  Tensor dropped = Tensor::empty({a.heads, a.tq, a.tk}, DType::kF32, ctx.device());
  Tensor grad = Tensor::empty({a.heads, a.tq, a.tk}, DType::kF32, ctx.device());
  Tensor delta = Tensor::empty({a.heads * a.tq}, DType::kF32, ctx.device());
  launch_attention_delta(y.data<float>(), dy.data<float>(), delta.data<float>(), a.heads * a.tq, a.dv, cc.stream());
  batched_matmul(ctx, heads_view(q), heads_view(k), false, true, probs);
  const unsigned blocks = blocks_for(a.heads * a.tq * a.tk);
  backward_probs_kernel<<<blocks, kThreads, 0, cc.stream()>>>(a, probs.data<float>(), dropped.data<float>(),
                                                              lse.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("backward_probs_kernel", "q={} k={}", q.shape().str(), k.shape().str());
  Tensor dv3 = heads_view(dv), dq3 = heads_view(dq), dk3 = heads_view(dk);
  const Tensor dy3 = heads_view(dy);
  batched_matmul(ctx, dropped, dy3, true, false, dv3);         // dv = p_dropped^T dy
  batched_matmul(ctx, dy3, heads_view(v), false, true, grad);  // d(p_dropped) = dy v^T
  backward_scores_kernel<<<blocks, kThreads, 0, cc.stream()>>>(a, probs.data<float>(), grad.data<float>(),
                                                               delta.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("backward_scores_kernel", "q={} k={}", q.shape().str(), k.shape().str());
  batched_matmul(ctx, grad, heads_view(k), false, false, dq3);  // dq = ds k (scale folded into ds)
  batched_matmul(ctx, grad, heads_view(q), true, false, dk3);   // dk = ds^T q
}

}  // namespace tandem::backend::cuda
