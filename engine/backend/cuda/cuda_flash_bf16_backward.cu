// scaled_dot_product_attention's backward on the tensor cores, in two kernels with no atomics, so
// the gradients repeat bitwise (FlashAttention-2 adds dq with float atomics; we recompute instead):
//  - per block of 64 keys (16 per warp): walk the query tiles that can see them, recompute
//    P^T = exp(K Q^T - lse) and dP^T = V dO^T, and accumulate dV += (P^T z) dO and dK += dS^T Q,
//    dS = P (dP z - delta), z the dropout factor;
//  - per block of 64 queries: walk the key tiles they see and accumulate dQ += dS K.
// Products are mma.sync bf16 with f32 accumulators; the probability and dS tiles go from one
// product's accumulators to the next's operand in registers (cuda_mma.cuh). Tiles past the causal
// diagonal are skipped.
#include <cuda_runtime.h>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_flash_bf16_tile.cuh"

namespace tandem::backend::cuda {
namespace {

using namespace flash;

// Query tile rows of the dk/dv kernel and key tile rows of the dq kernel: 64 at D = 64, 32 at D = 128
// (which keeps the f32 accumulators of two D-wide gradients inside the register file, no spills).
template <int D>
constexpr int tile_rows() {
  return D == 64 ? 64 : 32;
}

template <int D>
struct KeyBlockShared {
  bf16 k[kBlockRows * pitch<D>()];
  bf16 v[kBlockRows * pitch<D>()];
  bf16 q[tile_rows<D>() * pitch<D>()];
  bf16 dy[tile_rows<D>() * pitch<D>()];
  float lse[tile_rows<D>()];  // log2 units, +inf for rows that take no part (lse_log2)
  float delta[tile_rows<D>()];
};

template <int D>
struct QueryBlockShared {
  bf16 q[kBlockRows * pitch<D>()];
  bf16 dy[kBlockRows * pitch<D>()];
  bf16 k[tile_rows<D>() * pitch<D>()];
  bf16 v[tile_rows<D>() * pitch<D>()];
};

// The same with A read from rows [a_row0, a_row0 + 16) of a shared tile one fragment at a time, where
// holding A in registers would crowd out the dk and dv accumulators.
template <int K, int N>
__device__ __forceinline__ void product_rows_shared(float (&acc)[N / 8][4], const bf16* a_tile, int a_row0,
                                                    const bf16* tile, int pitch) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t a[4];
    mma::load_a(a, a_tile, pitch, a_row0, kk * 16);
#pragma unroll
    for (int nt = 0; nt < N / 8; ++nt) {
      uint32_t b[2];
      mma::load_b_rows(b, tile, pitch, nt * 8, kk * 16);
      mma::mma_16816(acc[nt], a, b);
    }
  }
}

template <int D>
__device__ __forceinline__ void load_fragments(uint32_t (&f)[D / 16][4], const bf16* tile, int row0) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) mma::load_a(f[kk], tile, pitch<D>(), row0, kk * 16);
}

// Writes a 16-row f32 accumulator tile (rows row0 and row0 + 8 of this thread) times `scale` to rows
// of a strided gradient, skipping rows at or beyond `rows`.
template <int D>
__device__ __forceinline__ void store_grad(float* base, const HeadStrides& s, int64_t h, int64_t bh, int64_t row0,
                                           int64_t rows, const float (&acc)[D / 8][4], float scale) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row0 + 8 * r;
    if (i >= rows) continue;
    float* row = base + head_row(s, h, bh, i);
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      *reinterpret_cast<float2*>(row + dn * 8 + 2 * t) =
          make_float2(acc[dn][2 * r] * scale, acc[dn][2 * r + 1] * scale);
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) flash_bf16_dkdv_kernel(FlashBf16Args f) {
  constexpr int kQueries = tile_rows<D>();
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  auto& sh = *reinterpret_cast<KeyBlockShared<D>*>(shared_bytes);
  const AttnLayout& a = f.a;
  const int64_t bh = blockIdx.x, j0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const auto* q = head_base(f.q, a.qs, a, bh);
  const auto* dy = head_base(f.dy, a.ys, a, bh);
  load_tile<D, kBlockRows>(sh.k, head_base(f.k, a.ks, a, bh), a.ks.row, j0, a.tk);
  load_tile<D, kBlockRows>(sh.v, head_base(f.v, a.vs, a, bh), a.vs.row, j0, a.tk);
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const float scale = a.scale * kLog2e;
  const int64_t key0 = j0 + warp * kWarpRows + g;  // this thread's keys: key0 and key0 + 8
  // Under the causal rule query i sees key j when i >= j - (tk - tq): earlier queries are skipped.
  int64_t i_begin = a.causal ? j0 - (a.tk - a.tq) : 0;
  i_begin = i_begin < 0 ? 0 : (i_begin / kQueries) * kQueries;
  for (int64_t i0 = i_begin; i0 < a.tq; i0 += kQueries) {
    load_tile<D, kQueries>(sh.q, q, a.qs.row, i0, a.tq);
    load_tile<D, kQueries>(sh.dy, dy, a.ys.row, i0, a.tq);
    for (int r = threadIdx.x; r < kQueries; r += kThreads) {
      sh.lse[r] = lse_log2(a, f.saved_lse, bh, i0 + r);
      sh.delta[r] = i0 + r < a.tq ? f.delta[bh * a.tq + i0 + r] : 0.0f;
    }
    mma::copy_wait<0>();
    __syncthreads();
    float pt[kQueries / 8][4] = {}, dpt[kQueries / 8][4] = {};
    product_rows_shared<D, kQueries>(pt, sh.k, warp * kWarpRows, sh.q, pitch<D>());
    product_rows_shared<D, kQueries>(dpt, sh.v, warp * kWarpRows, sh.dy, pitch<D>());
    const bool masked = tile_needs_mask(a, i0, j0, kBlockRows);
#pragma unroll
    for (int nt = 0; nt < kQueries / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * t + (e % 2);
        const int64_t i = i0 + col, j = key0 + 8 * (e / 2);
        const float p = masked && !visible(a, i, j) ? 0.0f : exp2f(pt[nt][e] * scale - sh.lse[col]);
        const float z = a.dropout_p > 0.0f ? attn_dropout(a, bh, i, j) : 1.0f;
        dpt[nt][e] = p * (dpt[nt][e] * z - sh.delta[col]);  // dS^T
        pt[nt][e] = p * z;
      }
    }
    product_cols<kQueries, D>(dv, pt, sh.dy, pitch<D>());
    product_cols<kQueries, D>(dk, dpt, sh.q, pitch<D>());
    __syncthreads();  // every warp is done with this query tile before the next one loads
  }
  mma::copy_wait<0>();  // the K and V copies are waited for inside the loop, which runs at least once
  store_grad<D>(f.dk, a.ks, a.h, bh, key0, a.tk, dk, a.scale);
  store_grad<D>(f.dv, a.vs, a.h, bh, key0, a.tk, dv, 1.0f);
}

template <int D>
__global__ void __launch_bounds__(kThreads) flash_bf16_dq_kernel(FlashBf16Args f) {
  constexpr int kKeys = tile_rows<D>();
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  auto& sh = *reinterpret_cast<QueryBlockShared<D>*>(shared_bytes);
  const AttnLayout& a = f.a;
  const int64_t bh = blockIdx.x, i0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
  const auto* k = head_base(f.k, a.ks, a, bh);
  const auto* v = head_base(f.v, a.vs, a, bh);
  load_tile<D, kBlockRows>(sh.q, head_base(f.q, a.qs, a, bh), a.qs.row, i0, a.tq);
  load_tile<D, kBlockRows>(sh.dy, head_base(f.dy, a.ys, a, bh), a.ys.row, i0, a.tq);
  const int64_t row0 = i0 + warp * kWarpRows + g;  // this thread's queries: row0 and row0 + 8
  float lse[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lse[r] = lse_log2(a, f.saved_lse, bh, row0 + 8 * r);
    delta[r] = row0 + 8 * r < a.tq ? f.delta[bh * a.tq + row0 + 8 * r] : 0.0f;
  }
  mma::copy_wait<0>();
  __syncthreads();
  uint32_t qf[D / 16][4], dyf[D / 16][4];
  load_fragments<D>(qf, sh.q, warp * kWarpRows);
  load_fragments<D>(dyf, sh.dy, warp * kWarpRows);
  float dq[D / 8][4] = {};
  const float scale = a.scale * kLog2e;
  const int64_t key_end = attn_key_end(a, i0 + kBlockRows < a.tq ? i0 + kBlockRows : a.tq);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeys) {
    load_tile<D, kKeys>(sh.k, k, a.ks.row, j0, a.tk);
    load_tile<D, kKeys>(sh.v, v, a.vs.row, j0, a.tk);
    mma::copy_wait<0>();
    __syncthreads();
    float s[kKeys / 8][4] = {}, dp[kKeys / 8][4] = {};
    product_rows<D, kKeys>(s, qf, sh.k, pitch<D>());
    product_rows<D, kKeys>(dp, dyf, sh.v, pitch<D>());
    const bool masked = tile_needs_mask(a, i0, j0, kKeys);
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = row0 + 8 * (e / 2), j = j0 + nt * 8 + 2 * t + (e % 2);
        const float p = masked && !visible(a, i, j) ? 0.0f : exp2f(s[nt][e] * scale - lse[e / 2]);
        const float z = a.dropout_p > 0.0f ? attn_dropout(a, bh, i, j) : 1.0f;
        s[nt][e] = p * (dp[nt][e] * z - delta[e / 2]);  // dS
      }
    }
    product_cols<kKeys, D>(dq, s, sh.k, pitch<D>());
    __syncthreads();  // every warp is done with this key tile before the next one loads
  }
  store_grad<D>(f.dq, a.qs, a.h, bh, row0, a.tq, dq, a.scale);
}

template <typename Kernel>
void launch(Kernel kernel, const char* name, int bytes, int64_t rows, const FlashBf16Args& f, cudaStream_t stream) {
  TANDEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                    "{}: {} bytes of shared memory", name, bytes);
  const dim3 grid(static_cast<unsigned>(f.a.heads), static_cast<unsigned>((rows + kBlockRows - 1) / kBlockRows));
  kernel<<<grid, kThreads, bytes, stream>>>(f);
  TANDEM_CUDA_LAUNCH_CHECK(name, "D={} heads={} tq={} tk={} causal={}", f.a.d, f.a.heads, f.a.tq, f.a.tk, f.a.causal);
}

template <int D>
void launch_backward(const FlashBf16Args& f, cudaStream_t stream) {
  launch(flash_bf16_dkdv_kernel<D>, "flash_bf16_dkdv_kernel", static_cast<int>(sizeof(KeyBlockShared<D>)), f.a.tk, f,
         stream);
  launch(flash_bf16_dq_kernel<D>, "flash_bf16_dq_kernel", static_cast<int>(sizeof(QueryBlockShared<D>)), f.a.tq, f,
         stream);
}

}  // namespace

void flash_bf16_backward(const FlashBf16Args& f, cudaStream_t stream) {
  if (f.a.d == 64) return launch_backward<64>(f, stream);
  launch_backward<128>(f, stream);
}

}  // namespace tandem::backend::cuda
