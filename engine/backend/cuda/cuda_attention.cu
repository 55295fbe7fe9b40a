// scaled_dot_product_attention's f32 kernels, FlashAttention's scheme without tensor cores: no
// (Tq, Tk) tensor is ever stored. Forward: a thread per query row, key/value tiles of kCols in shared
// memory, an online softmax per row (rescaled once per tile). Backward in two kernels with no atomics,
// so gradients repeat bitwise: threads per key row accumulate dk and dv over query tiles, then
// threads per query row accumulate dq over key tiles (two per row at D 48 and 64); both recompute
// probabilities from the saved lse. Head sizes 16, 32, 48 and 64; q, k, v and y are read and written by AttnLayout's strides.
// Which path runs is cuda_attention_dispatch.cu's choice.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "engine/backend/cuda/cuda_attention_common.cuh"
#include "engine/backend/cuda/cuda_bf16_access.cuh"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_reduce.cuh"

namespace tandem::backend::cuda {
namespace {

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
  const int64_t bh = blockIdx.x;  // heads on x: up to 2^31 - 1 of them
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int64_t i = i0 + threadIdx.x;
  const bool active = i < a.tq;
  q += head_row(a.qs, a.h, bh, 0);
  k += head_row(a.ks, a.h, bh, 0);
  v += head_row(a.vs, a.h, bh, 0);
  float qr[D], o[D];
#pragma unroll
  for (int c = 0; c < D; ++c) {
    qr[c] = active ? q[i * a.qs.row + c] : 0.0f;
    o[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int64_t key_end = attn_key_end(a, i0 + kRows < a.tq ? i0 + kRows : a.tq);
  for (int64_t j0 = 0; j0 < key_end; j0 += kCols) {
    const int nk = key_end - j0 < kCols ? static_cast<int>(key_end - j0) : kCols;
    for (int e = threadIdx.x; e < kCols * D; e += kRows) {
      const int r = e / D, c = e % D;
      ks[r][c] = r < nk ? k[(j0 + r) * a.ks.row + c] : 0.0f;
      vs[r][c] = r < nk ? v[(j0 + r) * a.vs.row + c] : 0.0f;
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
  for (int c = 0; c < D; ++c) y[head_row(a.ys, a.h, bh, i) + c] = o[c] * inv;
  lse[bh * a.tq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

__device__ __forceinline__ float probability(float score, float row_lse) {
  return score == -INFINITY || row_lse == -INFINITY ? 0.0f : expf(score - row_lse);
}

// The backward kernels give each row (a key's dk and dv, or a query's dq) to kSplit<D> threads, each
// accumulating D / kSplit of its columns (c = part, part + kSplit, ...): at D 48 and 64 a row's
// accumulators no longer fit one thread's 255 registers (ptxas spilled 836 and 228 bytes). The pair
// adds its two halves of each dot product by one shuffle, in the same order in both threads, so both
// hold the same bits. Rows in shared memory are padded to D + kSplit floats: the 32 lanes' reads of
// one column step fall in 32 different banks.
template <int D>
constexpr int kSplit = D >= 48 ? 2 : 1;
template <int D>
constexpr int kRowStride = D + kSplit<D>;

// The sum of this thread's partial dot product and its partners' (the same bits in every partner).
template <int S>
__device__ __forceinline__ float row_dot(float partial) {
  if constexpr (S == 2) partial += __shfl_xor_sync(kFullWarp, partial, 1);
  return partial;
}

// dk and dv of kGradRows keys: kSplit<D> threads own a key row (its k and v padded in shared memory,
// their share of its gradients in registers) and walk every query tile that can see the block's keys.
// Every thread walks the same tiles and rows, active or not, so that the pairs' shuffles line up.
template <int D>
__global__ void __launch_bounds__(kGradRows* kSplit<D>) flash_dkdv_kernel(AttnLayout a, const float* q,
                                                                          const float* k, const float* v,
                                                                          const float* dy, const float* lse,
                                                                          const float* delta, float* dk, float* dv) {
  constexpr int S = kSplit<D>, kPart = D / S, kThreads = kGradRows * S;
  __shared__ float kr[kGradRows][kRowStride<D>];
  __shared__ float vr[kGradRows][kRowStride<D>];
  __shared__ float qs[kCols][D];
  __shared__ float dys[kCols][D];
  __shared__ float lse_s[kCols], delta_s[kCols];
  const int64_t bh = blockIdx.x;  // heads on x: up to 2^31 - 1 of them
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kGradRows;
  const int row = threadIdx.x / S, part = threadIdx.x % S;
  const int64_t j = j0 + row;
  const bool active = j < a.tk;
  q += head_row(a.qs, a.h, bh, 0);
  dy += head_row(a.ys, a.h, bh, 0);
  for (int e = threadIdx.x; e < kGradRows * D; e += kThreads) {
    const int r = e / D, c = e % D;
    const bool in = j0 + r < a.tk;
    kr[r][c] = in ? k[head_row(a.ks, a.h, bh, j0 + r) + c] : 0.0f;
    vr[r][c] = in ? v[head_row(a.vs, a.h, bh, j0 + r) + c] : 0.0f;
  }
  float dk_acc[kPart], dv_acc[kPart];
#pragma unroll
  for (int c = 0; c < kPart; ++c) dk_acc[c] = dv_acc[c] = 0.0f;
  // Under the causal rule query i sees key j when i >= j - (tk - tq): earlier queries are skipped.
  int64_t i_start = a.causal ? j0 - (a.tk - a.tq) : 0;
  i_start = i_start < 0 ? 0 : i_start;
  __syncthreads();
  for (int64_t i0 = i_start; i0 < a.tq; i0 += kCols) {
    const int nq = a.tq - i0 < kCols ? static_cast<int>(a.tq - i0) : kCols;
    for (int e = threadIdx.x; e < kCols * D; e += kThreads) {
      const int r = e / D, c = e % D;
      qs[r][c] = r < nq ? q[(i0 + r) * a.qs.row + c] : 0.0f;
      dys[r][c] = r < nq ? dy[(i0 + r) * a.ys.row + c] : 0.0f;
    }
    for (int r = threadIdx.x; r < kCols; r += kThreads) {
      lse_s[r] = r < nq ? lse[bh * a.tq + i0 + r] : -INFINITY;
      delta_s[r] = r < nq ? delta[bh * a.tq + i0 + r] : 0.0f;
    }
    __syncthreads();
    for (int ii = 0; ii < nq; ++ii) {
      const int64_t i = i0 + ii;
      float dot = 0.0f, dp = 0.0f;
#pragma unroll
      for (int c = 0; c < kPart; ++c) {
        const int col = part + c * S;
        dot += qs[ii][col] * kr[row][col];
        dp += dys[ii][col] * vr[row][col];
      }
      dot = row_dot<S>(dot);
      dp = row_dot<S>(dp);
      // An inactive row (a key past tk) computes nothing: its score would read the mask out of bounds.
      const float p = active ? probability(attn_score(a, bh, i, j, dot), lse_s[ii]) : 0.0f;
      if (p == 0.0f) continue;
      const float z = attn_dropout(a, bh, i, j);
      const float ds = p * (dp * z - delta_s[ii]);
#pragma unroll
      for (int c = 0; c < kPart; ++c) {
        const int col = part + c * S;
        dv_acc[c] += p * z * dys[ii][col];
        dk_acc[c] += ds * qs[ii][col];
      }
    }
    __syncthreads();
  }
  if (!active) return;
#pragma unroll
  for (int c = 0; c < kPart; ++c) {
    const int col = part + c * S;
    dk[head_row(a.ks, a.h, bh, j) + col] = dk_acc[c] * a.scale;
    dv[head_row(a.vs, a.h, bh, j) + col] = dv_acc[c];
  }
}

// dq of kGradRows queries: kSplit<D> threads own a query row and walk the key tiles it can see.
template <int D>
__global__ void __launch_bounds__(kGradRows* kSplit<D>) flash_dq_kernel(AttnLayout a, const float* q,
                                                                        const float* k, const float* v,
                                                                        const float* dy, const float* lse,
                                                                        const float* delta, float* dq) {
  constexpr int S = kSplit<D>, kPart = D / S, kThreads = kGradRows * S;
  __shared__ float qr[kGradRows][kRowStride<D>];
  __shared__ float dyr[kGradRows][kRowStride<D>];
  __shared__ float ks[kCols][D];
  __shared__ float vs[kCols][D];
  const int64_t bh = blockIdx.x;  // heads on x: up to 2^31 - 1 of them
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kGradRows;
  const int row = threadIdx.x / S, part = threadIdx.x % S;
  const int64_t i = i0 + row;
  const bool active = i < a.tq;
  k += head_row(a.ks, a.h, bh, 0);
  v += head_row(a.vs, a.h, bh, 0);
  for (int e = threadIdx.x; e < kGradRows * D; e += kThreads) {
    const int r = e / D, c = e % D;
    const bool in = i0 + r < a.tq;
    qr[r][c] = in ? q[head_row(a.qs, a.h, bh, i0 + r) + c] : 0.0f;
    dyr[r][c] = in ? dy[head_row(a.ys, a.h, bh, i0 + r) + c] : 0.0f;
  }
  const float row_lse = active ? lse[bh * a.tq + i] : -INFINITY;
  const float row_delta = active ? delta[bh * a.tq + i] : 0.0f;
  float dq_acc[kPart];
#pragma unroll
  for (int c = 0; c < kPart; ++c) dq_acc[c] = 0.0f;
  const int64_t key_end = attn_key_end(a, i0 + kGradRows < a.tq ? i0 + kGradRows : a.tq);
  __syncthreads();
  for (int64_t j0 = 0; j0 < key_end; j0 += kCols) {
    const int nk = key_end - j0 < kCols ? static_cast<int>(key_end - j0) : kCols;
    for (int e = threadIdx.x; e < kCols * D; e += kThreads) {
      const int r = e / D, c = e % D;
      ks[r][c] = r < nk ? k[(j0 + r) * a.ks.row + c] : 0.0f;
      vs[r][c] = r < nk ? v[(j0 + r) * a.vs.row + c] : 0.0f;
    }
    __syncthreads();
    for (int jj = 0; jj < nk; ++jj) {
      const int64_t j = j0 + jj;
      float dot = 0.0f, dp = 0.0f;
#pragma unroll
      for (int c = 0; c < kPart; ++c) {
        const int col = part + c * S;
        dot += qr[row][col] * ks[jj][col];
        dp += dyr[row][col] * vs[jj][col];
      }
      dot = row_dot<S>(dot);
      dp = row_dot<S>(dp);
      // An inactive row (a query past tq) computes nothing: its score would read the mask out of bounds.
      const float p = active ? probability(attn_score(a, bh, i, j, dot), row_lse) : 0.0f;
      if (p == 0.0f) continue;
      const float ds = p * (dp * attn_dropout(a, bh, i, j) - row_delta);
#pragma unroll
      for (int c = 0; c < kPart; ++c) dq_acc[c] += ds * ks[jj][part + c * S];
    }
    __syncthreads();
  }
  if (!active) return;
#pragma unroll
  for (int c = 0; c < kPart; ++c) dq[head_row(a.qs, a.h, bh, i) + part + c * S] = dq_acc[c] * a.scale;
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

// delta_kernel for y and dy laid out by a.ys; row = bh Tq + i.
__global__ void strided_delta_kernel(AttnLayout a, F32OrBf16 y, const float* dy, float* delta) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t rows = a.heads * a.tq;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarpSize;
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize; row < rows;
       row += warps) {
    const int64_t offset = head_row(a.ys, a.h, row / a.tq, row % a.tq);
    float s = 0.0f;
    for (int64_t c = lane; c < a.dv; c += kWarpSize) s += y[offset + c] * dy[offset + c];
    for (int o = kWarpSize / 2; o > 0; o /= 2) s += __shfl_xor_sync(kFullWarp, s, o);
    if (lane == 0) delta[row] = s;
  }
}

unsigned delta_blocks(int64_t rows) {
  const int64_t blocks = (rows * kWarpSize + 255) / 256;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

template <int D>
void forward_f32(const AttnLayout& a, const float* q, const float* k, const float* v, float* y, float* lse,
                 cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.heads), static_cast<unsigned>((a.tq + kRows - 1) / kRows));
  flash_forward_kernel<D><<<grid, kRows, 0, stream>>>(a, q, k, v, y, lse);
  TANDEM_CUDA_LAUNCH_CHECK("flash_forward_kernel", "D={} heads={} tq={} tk={} causal={}", D, a.heads, a.tq, a.tk,
                           a.causal);
}

template <int D>
void backward_f32(const AttnLayout& a, const F32AttentionGrads& g, cudaStream_t stream) {
  const dim3 key_grid(static_cast<unsigned>(a.heads), static_cast<unsigned>((a.tk + kGradRows - 1) / kGradRows));
  flash_dkdv_kernel<D><<<key_grid, kGradRows * kSplit<D>, 0, stream>>>(a, g.q, g.k, g.v, g.dy, g.lse, g.delta, g.dk, g.dv);
  TANDEM_CUDA_LAUNCH_CHECK("flash_dkdv_kernel", "D={} heads={} tq={} tk={}", D, a.heads, a.tq, a.tk);
  const dim3 query_grid(static_cast<unsigned>(a.heads), static_cast<unsigned>((a.tq + kGradRows - 1) / kGradRows));
  flash_dq_kernel<D><<<query_grid, kGradRows * kSplit<D>, 0, stream>>>(a, g.q, g.k, g.v, g.dy, g.lse, g.delta, g.dq);
  TANDEM_CUDA_LAUNCH_CHECK("flash_dq_kernel", "D={} heads={} tq={} tk={}", D, a.heads, a.tq, a.tk);
}

}  // namespace

bool flash_f32_head_size(int64_t d) { return d == 16 || d == 32 || d == 48 || d == 64; }

void flash_f32_forward(const AttnLayout& a, const float* q, const float* k, const float* v, float* y, float* lse,
                       cudaStream_t stream) {
  switch (a.d) {
    case 16: return forward_f32<16>(a, q, k, v, y, lse, stream);
    case 32: return forward_f32<32>(a, q, k, v, y, lse, stream);
    case 48: return forward_f32<48>(a, q, k, v, y, lse, stream);
    default: return forward_f32<64>(a, q, k, v, y, lse, stream);
  }
}

void flash_f32_backward(const AttnLayout& a, const F32AttentionGrads& g, cudaStream_t stream) {
  switch (a.d) {
    case 16: return backward_f32<16>(a, g, stream);
    case 32: return backward_f32<32>(a, g, stream);
    case 48: return backward_f32<48>(a, g, stream);
    default: return backward_f32<64>(a, g, stream);
  }
}

void launch_attention_delta(const float* y, const float* dy, float* delta, int64_t rows, int64_t dv,
                            cudaStream_t stream) {
  delta_kernel<<<delta_blocks(rows), 256, 0, stream>>>(y, dy, delta, rows, dv);
  TANDEM_CUDA_LAUNCH_CHECK("delta_kernel", "rows={} dv={}", rows, dv);
}

void launch_attention_delta(const AttnLayout& a, const void* y, bool y_bf16, const float* dy, float* delta,
                            cudaStream_t stream) {
  strided_delta_kernel<<<delta_blocks(a.heads * a.tq), 256, 0, stream>>>(a, F32OrBf16{y, y_bf16}, dy, delta);
  TANDEM_CUDA_LAUNCH_CHECK("strided_delta_kernel", "heads={} tq={} dv={} y_bf16={}", a.heads, a.tq, a.dv, y_bf16);
}

}  // namespace tandem::backend::cuda
