// scaled_dot_product_attention on the GPU, FlashAttention's scheme in f32: no (Tq, Tk) tensor is
// ever stored. Forward: a thread per query row, key/value tiles of kCols in shared memory, an online
// softmax per row (rescaled once per tile). Backward in two kernels with no atomics, so gradients
// repeat bitwise: a thread per key row accumulates dk and dv over query tiles, then a thread per
// query row accumulates dq over key tiles; both recompute probabilities from the saved lse. Head
// sizes 16, 32, 48 and 64 (equal for q, k and v) take these kernels; others, and
// TANDEM_CUDA_ATTENTION=unfused, take the unfused path (cuda_attention_unfused.cu).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

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

constexpr int kRows = 128;     // forward: queries per block, one per thread
constexpr int kCols = 32;      // keys (or queries) per shared-memory tile
constexpr int kGradRows = 32;  // backward: key (dk, dv) or query (dq) rows per block

template <int D>
__global__ void __launch_bounds__(kRows) flash_forward_kernel(AttnLayout a, const float* q, const float* k,
                                                              const float* v, float* y, float* lse) {
  __shared__ float ks[kCols][D];
  __shared__ float vs[kCols][D];
  const int64_t bh = blockIdx.y;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t i = i0 + threadIdx.x;
  const bool active = i < a.tq;
  float qr[D], o[D];
#pragma unroll
  for (int c = 0; c < D; ++c) {
    qr[c] = active ? q[(bh * a.tq + i) * D + c] : 0.0f;
    o[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int64_t key_end = attn_key_end(a, i0 + kRows < a.tq ? i0 + kRows : a.tq);
  for (int64_t j0 = 0; j0 < key_end; j0 += kCols) {
    const int nk = key_end - j0 < kCols ? static_cast<int>(key_end - j0) : kCols;
    for (int e = threadIdx.x; e < kCols * D; e += kRows) {
      const int r = e / D, c = e % D;
      ks[r][c] = r < nk ? k[(bh * a.tk + j0 + r) * D + c] : 0.0f;
      vs[r][c] = r < nk ? v[(bh * a.tk + j0 + r) * D + c] : 0.0f;
    }
    __syncthreads();
    if (active) {
      float s[kCols];
      float tile_max = -INFINITY;
#pragma unroll
      for (int jj = 0; jj < kCols; ++jj) {
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < D; ++c) dot += qr[c] * ks[jj][c];
        s[jj] = jj < nk ? attn_score(a, bh, i, j0 + jj, dot) : -INFINITY;
        tile_max = fmaxf(tile_max, s[jj]);
      }
      const float m_new = fmaxf(m, tile_max);
      if (m_new != -INFINITY) {
        const float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
        l *= corr;
#pragma unroll
        for (int c = 0; c < D; ++c) o[c] *= corr;
#pragma unroll
        for (int jj = 0; jj < kCols; ++jj) {
          const float p = s[jj] == -INFINITY ? 0.0f : expf(s[jj] - m_new);
          l += p;  // the normaliser counts every probability, dropped or not
          const float pd = p * attn_dropout(a, bh, i, j0 + jj);
#pragma unroll
          for (int c = 0; c < D; ++c) o[c] += pd * vs[jj][c];
        }
        m = m_new;
      }
    }
    __syncthreads();
  }
  if (!active) return;
  // A query that sees no key gets zeros and lse -inf (the CPU backend's rule).
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int c = 0; c < D; ++c) y[(bh * a.tq + i) * D + c] = o[c] * inv;
  lse[bh * a.tq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

__device__ __forceinline__ float probability(const AttnLayout& a, float score, float row_lse) {
  return score == -INFINITY || row_lse == -INFINITY ? 0.0f : expf(score - row_lse);
}

// dk and dv of kGradRows keys: each thread owns a key row (its k and v padded in shared memory, its
// gradients in registers) and walks every query tile that can see the block's keys.
template <int D>
__global__ void __launch_bounds__(kGradRows) flash_dkdv_kernel(AttnLayout a, const float* q, const float* k,
                                                               const float* v, const float* dy, const float* lse,
                                                               const float* delta, float* dk, float* dv) {
  __shared__ float kr[kGradRows][D + 1];
  __shared__ float vr[kGradRows][D + 1];
  __shared__ float qs[kCols][D];
  __shared__ float dys[kCols][D];
  __shared__ float lse_s[kCols], delta_s[kCols];
  const int64_t bh = blockIdx.y;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kGradRows;
  const int64_t j = j0 + threadIdx.x;
  const bool active = j < a.tk;
  for (int e = threadIdx.x; e < kGradRows * D; e += kGradRows) {
    const int r = e / D, c = e % D;
    const bool in = j0 + r < a.tk;
    kr[r][c] = in ? k[(bh * a.tk + j0 + r) * D + c] : 0.0f;
    vr[r][c] = in ? v[(bh * a.tk + j0 + r) * D + c] : 0.0f;
  }
  float dk_acc[D], dv_acc[D];
#pragma unroll
  for (int c = 0; c < D; ++c) dk_acc[c] = dv_acc[c] = 0.0f;
  // Under the causal rule query i sees key j when i >= j - (tk - tq): earlier queries are skipped.
  int64_t i_start = a.causal ? j0 - (a.tk - a.tq) : 0;
  i_start = i_start < 0 ? 0 : i_start;
  __syncthreads();
  for (int64_t i0 = i_start; i0 < a.tq; i0 += kCols) {
    const int nq = a.tq - i0 < kCols ? static_cast<int>(a.tq - i0) : kCols;
    for (int e = threadIdx.x; e < kCols * D; e += kGradRows) {
      const int r = e / D, c = e % D;
      qs[r][c] = r < nq ? q[(bh * a.tq + i0 + r) * D + c] : 0.0f;
      dys[r][c] = r < nq ? dy[(bh * a.tq + i0 + r) * D + c] : 0.0f;
    }
    for (int r = threadIdx.x; r < kCols; r += kGradRows) {
      lse_s[r] = r < nq ? lse[bh * a.tq + i0 + r] : -INFINITY;
      delta_s[r] = r < nq ? delta[bh * a.tq + i0 + r] : 0.0f;
    }
    __syncthreads();
    if (active) {
      for (int ii = 0; ii < nq; ++ii) {
        const int64_t i = i0 + ii;
        float dot = 0.0f, dp = 0.0f;
#pragma unroll
        for (int c = 0; c < D; ++c) {
          dot += qs[ii][c] * kr[threadIdx.x][c];
          dp += dys[ii][c] * vr[threadIdx.x][c];
        }
        const float p = probability(a, attn_score(a, bh, i, j, dot), lse_s[ii]);
        if (p == 0.0f) continue;
        const float z = attn_dropout(a, bh, i, j);
        const float ds = p * (dp * z - delta_s[ii]);
#pragma unroll
        for (int c = 0; c < D; ++c) {
          dv_acc[c] += p * z * dys[ii][c];
          dk_acc[c] += ds * qs[ii][c];
        }
      }
    }
    __syncthreads();
  }
  if (!active) return;
#pragma unroll
  for (int c = 0; c < D; ++c) {
    dk[(bh * a.tk + j) * D + c] = dk_acc[c] * a.scale;
    dv[(bh * a.tk + j) * D + c] = dv_acc[c];
  }
}

// dq of kGradRows queries: each thread owns a query row and walks the key tiles it can see.
template <int D>
__global__ void __launch_bounds__(kGradRows) flash_dq_kernel(AttnLayout a, const float* q, const float* k,
                                                             const float* v, const float* dy, const float* lse,
                                                             const float* delta, float* dq) {
  __shared__ float qr[kGradRows][D + 1];
  __shared__ float dyr[kGradRows][D + 1];
  __shared__ float ks[kCols][D];
  __shared__ float vs[kCols][D];
  const int64_t bh = blockIdx.y;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kGradRows;
  const int64_t i = i0 + threadIdx.x;
  const bool active = i < a.tq;
  for (int e = threadIdx.x; e < kGradRows * D; e += kGradRows) {
    const int r = e / D, c = e % D;
    const bool in = i0 + r < a.tq;
    qr[r][c] = in ? q[(bh * a.tq + i0 + r) * D + c] : 0.0f;
    dyr[r][c] = in ? dy[(bh * a.tq + i0 + r) * D + c] : 0.0f;
  }
  const float row_lse = active ? lse[bh * a.tq + i] : -INFINITY;
  const float row_delta = active ? delta[bh * a.tq + i] : 0.0f;
  float dq_acc[D];
#pragma unroll
  for (int c = 0; c < D; ++c) dq_acc[c] = 0.0f;
  const int64_t key_end = attn_key_end(a, i0 + kGradRows < a.tq ? i0 + kGradRows : a.tq);
  __syncthreads();
  for (int64_t j0 = 0; j0 < key_end; j0 += kCols) {
    const int nk = key_end - j0 < kCols ? static_cast<int>(key_end - j0) : kCols;
    for (int e = threadIdx.x; e < kCols * D; e += kGradRows) {
      const int r = e / D, c = e % D;
      ks[r][c] = r < nk ? k[(bh * a.tk + j0 + r) * D + c] : 0.0f;
      vs[r][c] = r < nk ? v[(bh * a.tk + j0 + r) * D + c] : 0.0f;
    }
    __syncthreads();
    if (active) {
      for (int jj = 0; jj < nk; ++jj) {
        const int64_t j = j0 + jj;
        float dot = 0.0f, dp = 0.0f;
#pragma unroll
        for (int c = 0; c < D; ++c) {
          dot += qr[threadIdx.x][c] * ks[jj][c];
          dp += dyr[threadIdx.x][c] * vs[jj][c];
        }
        const float p = probability(a, attn_score(a, bh, i, j, dot), row_lse);
        if (p == 0.0f) continue;
        const float ds = p * (dp * attn_dropout(a, bh, i, j) - row_delta);
#pragma unroll
        for (int c = 0; c < D; ++c) dq_acc[c] += ds * ks[jj][c];
      }
    }
    __syncthreads();
  }
  if (!active) return;
#pragma unroll
  for (int c = 0; c < D; ++c) dq[(bh * a.tq + i) * D + c] = dq_acc[c] * a.scale;
}

__global__ void delta_kernel(const float* y, const float* dy, float* delta, int64_t rows, int64_t dv) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarpSize;
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize; row < rows;
       row += warps) {
    float s = 0.0f;
    for (int64_t c = lane; c < dv; c += kWarpSize) s += y[row * dv + c] * dy[row * dv + c];
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) s += __shfl_xor_sync(kFullWarp, s, offset);
    if (lane == 0) delta[row] = s;
  }
}

bool use_flash(const AttnLayout& a) {
  const char* choice = std::getenv("TANDEM_CUDA_ATTENTION");
  if (choice != nullptr && std::strcmp(choice, "unfused") == 0) return false;
  return a.d == a.dv && (a.d == 16 || a.d == 32 || a.d == 48 || a.d == 64);
}

template <int D>
void flash_forward(CudaContext& cc, const AttnLayout& a, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& y,
                   Tensor& lse) {
  const dim3 grid(static_cast<unsigned>((a.tq + kRows - 1) / kRows), static_cast<unsigned>(a.heads));
  flash_forward_kernel<D><<<grid, kRows, 0, cc.stream()>>>(a, q.data<float>(), k.data<float>(), v.data<float>(),
                                                           y.data<float>(), lse.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("flash_forward_kernel", "q={} k={} v={} causal={}", q.shape().str(), k.shape().str(),
                           v.shape().str(), a.causal);
}

template <int D>
void flash_backward(CudaContext& cc, const AttnLayout& a, const Tensor& q, const Tensor& k, const Tensor& v,
                    const Tensor& dy, const Tensor& lse, const float* delta, Tensor& dq, Tensor& dk, Tensor& dv) {
  const dim3 key_grid(static_cast<unsigned>((a.tk + kGradRows - 1) / kGradRows), static_cast<unsigned>(a.heads));
  flash_dkdv_kernel<D><<<key_grid, kGradRows, 0, cc.stream()>>>(a, q.data<float>(), k.data<float>(), v.data<float>(),
                                                                dy.data<float>(), lse.data<float>(), delta,
                                                                dk.data<float>(), dv.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("flash_dkdv_kernel", "q={} k={} v={}", q.shape().str(), k.shape().str(), v.shape().str());
  const dim3 query_grid(static_cast<unsigned>((a.tq + kGradRows - 1) / kGradRows), static_cast<unsigned>(a.heads));
  flash_dq_kernel<D><<<query_grid, kGradRows, 0, cc.stream()>>>(a, q.data<float>(), k.data<float>(), v.data<float>(),
                                                                dy.data<float>(), lse.data<float>(), delta,
                                                                dq.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("flash_dq_kernel", "q={} k={} v={}", q.shape().str(), k.shape().str(), v.shape().str());
}

}  // namespace

AttnLayout attn_layout(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& mask) {
  AttnLayout a{q.dim(0) * q.dim(1), q.dim(1), q.dim(2), k.dim(2), q.dim(3), v.dim(3), nullptr, 0, 0, p.scale,
               p.causal, p.dropout_p, p.dropout_p < 1.0f ? 1.0f / (1.0f - p.dropout_p) : 0.0f, p.dropout_seed};
  if (mask.defined()) {
    a.mask = mask.data<float>();
    a.mask_h_stride = mask.dim(1) == 1 ? 0 : a.tq * a.tk;
    a.mask_b_stride = mask.dim(0) == 1 ? 0 : mask.dim(1) * a.tq * a.tk;
  }
  return a;
}

void launch_attention_delta(const float* y, const float* dy, float* delta, int64_t rows, int64_t dv,
                            cudaStream_t stream) {
  int64_t blocks = (rows * kWarpSize + 255) / 256;
  blocks = blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks);
  delta_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(y, dy, delta, rows, dv);
  TANDEM_CUDA_LAUNCH_CHECK("delta_kernel", "rows={} dv={}", rows, dv);
}

void attention_forward(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& mask, Tensor& y, Tensor& lse) {
  const AttnLayout a = attn_layout(p, q, k, v, mask);
  if (!use_flash(a)) return attention_forward_unfused(ctx, p, q, k, v, mask, y, lse);
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  switch (a.d) {
    case 16: return flash_forward<16>(cc, a, q, k, v, y, lse);
    case 32: return flash_forward<32>(cc, a, q, k, v, y, lse);
    case 48: return flash_forward<48>(cc, a, q, k, v, y, lse);
    default: return flash_forward<64>(cc, a, q, k, v, y, lse);
  }
}

void attention_backward(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& mask, const Tensor& y, const Tensor& lse, const Tensor& dy, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  const AttnLayout a = attn_layout(p, q, k, v, mask);
  if (!use_flash(a)) return attention_backward_unfused(ctx, p, q, k, v, mask, y, lse, dy, dq, dk, dv);
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  auto* delta = static_cast<float*>(cc.workspace(sizeof(float) * static_cast<size_t>(a.heads * a.tq)));
  launch_attention_delta(y.data<float>(), dy.data<float>(), delta, a.heads * a.tq, a.dv, cc.stream());
  switch (a.d) {
    case 16: return flash_backward<16>(cc, a, q, k, v, dy, lse, delta, dq, dk, dv);
    case 32: return flash_backward<32>(cc, a, q, k, v, dy, lse, delta, dq, dk, dv);
    case 48: return flash_backward<48>(cc, a, q, k, v, dy, lse, delta, dq, dk, dv);
    default: return flash_backward<64>(cc, a, q, k, v, dy, lse, delta, dq, dk, dv);
  }
}

}  // namespace tandem::backend::cuda
