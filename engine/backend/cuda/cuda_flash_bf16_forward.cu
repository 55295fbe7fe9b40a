// scaled_dot_product_attention's forward on the tensor cores, in FlashAttention-2's scheme: a block
// of 4 warps owns 64 queries (16 per warp, their q fragments held in registers for the whole pass)
// and walks the key/value tiles of 64 keys; S = Q K^T and O += P V are mma.sync products with f32
// accumulators, the softmax is online (rescaled once per tile), and P goes from the S accumulators to
// the next product's operand without leaving registers. K and V have one shared-memory buffer each:
// V_j loads while S_j is computed and K_{j+1} while O += P_j V_j is. Tiles past the causal diagonal
// are never visited; only the tiles that cross it (or the last keys) apply the per-element rule.
#include <cuda_runtime.h>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_flash_bf16_tile.cuh"

namespace tandem::backend::cuda {
namespace {

using namespace flash;
using tandem::cuda::kFullWarp;

constexpr int kKeys = 64;  // keys per tile

template <int D>
struct ForwardShared {
  bf16 kq[kKeys * pitch<D>()];  // the query tile first, then each key tile
  bf16 v[kKeys * pitch<D>()];
};

// Per-thread softmax state of the warp's two rows this thread holds (g and g + 8).
struct RowState {
  float max[2] = {-INFINITY, -INFINITY};  // in log2 units
  float sum[2] = {0.0f, 0.0f};            // this thread's share of the normaliser
};

// Turns the scores s of one tile into probabilities (in place, dropout applied) and rescales the
// running sums and the output accumulators o to the tile's new row maxima.
template <int D>
__device__ __forceinline__ void online_softmax(const AttnLayout& a, int64_t bh, int64_t row0, int64_t j0, bool masked,
                                               float (&s)[kKeys / 8][4], RowState& st, float (&o)[D / 8][4]) {
  const int t = threadIdx.x % 4;
  const float scale = a.scale * kLog2e;
  float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[nt][e] * scale;
      if (masked && !visible(a, row0 + 8 * (e / 2), j0 + nt * 8 + 2 * t + (e % 2))) x = -INFINITY;
      s[nt][e] = x;
      tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
    }
  }
  float base[2], corr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFullWarp, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(kFullWarp, tile_max[r], 2));
    const float next = fmaxf(st.max[r], tile_max[r]);
    base[r] = next == -INFINITY ? 0.0f : next;  // a row that has seen no key yet: every p is 0
    corr[r] = exp2f(st.max[r] - base[r]);       // 0 on the first visible tile (max was -inf)
    st.max[r] = next;
    st.sum[r] *= corr[r];
  }
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float p = exp2f(s[nt][e] - base[e / 2]);
      st.sum[e / 2] += p;  // the normaliser counts every probability, dropped or not
      s[nt][e] = a.dropout_p > 0.0f ? p * attn_dropout(a, bh, row0 + 8 * (e / 2), j0 + nt * 8 + 2 * t + (e % 2)) : p;
    }
  }
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    o[dn][0] *= corr[0];
    o[dn][1] *= corr[0];
    o[dn][2] *= corr[1];
    o[dn][3] *= corr[1];
  }
}

// y = o / sum (f32, or rounded to bf16 when f.y16 is set) and lse for the thread's two rows; a query that sees no key gets zeros and lse -inf
// (the CPU backend's rule).
template <int D>
__device__ __forceinline__ void store_rows(const FlashBf16Args& f, int64_t bh, int64_t row0, RowState& st,
                                           const float (&o)[D / 8][4]) {
  const AttnLayout& a = f.a;
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st.sum[r] += __shfl_xor_sync(kFullWarp, st.sum[r], 1);
    st.sum[r] += __shfl_xor_sync(kFullWarp, st.sum[r], 2);
    const int64_t i = row0 + 8 * r;
    if (i >= a.tq) continue;
    const float inv = st.sum[r] > 0.0f ? 1.0f / st.sum[r] : 0.0f;
    const int64_t row = head_row(a.ys, a.h, bh, i) + 2 * t;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      const float y0 = o[dn][2 * r] * inv, y1 = o[dn][2 * r + 1] * inv;
      if (f.y16 != nullptr) {  // the same branch for the whole launch
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(f.y16) + row + dn * 8) =
            __floats2bfloat162_rn(y0, y1);
      } else {
        *reinterpret_cast<float2*>(f.y + row + dn * 8) = make_float2(y0, y1);
      }
    }
    if (t == 0) f.lse[bh * a.tq + i] = st.sum[r] > 0.0f ? (st.max[r] + log2f(st.sum[r])) * kLn2 : -INFINITY;
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) flash_bf16_forward_kernel(FlashBf16Args f) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  auto& sh = *reinterpret_cast<ForwardShared<D>*>(shared_bytes);
  const AttnLayout& a = f.a;
  const int64_t bh = blockIdx.x, i0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int warp = threadIdx.x / 32, g = (threadIdx.x % 32) / 4;
  const auto* q = head_base(f.q, a.qs, a, bh);
  const auto* k = head_base(f.k, a.ks, a, bh);
  const auto* v = head_base(f.v, a.vs, a, bh);

  load_tile<D, kBlockRows>(sh.kq, q, a.qs.row, i0, a.tq);
  mma::copy_wait<0>();
  __syncthreads();
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) mma::load_a(qf[kk], sh.kq, pitch<D>(), warp * kWarpRows, kk * 16);
  __syncthreads();

  const int64_t key_end = attn_key_end(a, i0 + kBlockRows < a.tq ? i0 + kBlockRows : a.tq);
  if (key_end > 0) load_tile<D, kKeys>(sh.kq, k, a.ks.row, 0, a.tk);
  float o[D / 8][4] = {};
  RowState st;
  const int64_t row0 = i0 + warp * kWarpRows + g;
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeys) {
    mma::copy_wait<0>();
    __syncthreads();  // K_j is in; every warp is done with V_{j-1}
    load_tile<D, kKeys>(sh.v, v, a.vs.row, j0, a.tk);
    float s[kKeys / 8][4] = {};
    product_rows<D, kKeys>(s, qf, sh.kq, pitch<D>());  // S = Q K^T
    online_softmax<D>(a, bh, row0, j0, tile_needs_mask(a, i0, j0, kKeys), s, st, o);
    mma::copy_wait<0>();
    __syncthreads();  // V_j is in; every warp is done with K_j
    if (j0 + kKeys < key_end) load_tile<D, kKeys>(sh.kq, k, a.ks.row, j0 + kKeys, a.tk);
    product_cols<kKeys, D>(o, s, sh.v, pitch<D>());  // O += P V
  }
  store_rows<D>(f, bh, row0, st, o);
}

template <int D>
void launch_forward(const FlashBf16Args& f, cudaStream_t stream) {
  const auto bytes = static_cast<int>(sizeof(ForwardShared<D>));
  TANDEM_CUDA_CHECK(
      cudaFuncSetAttribute(flash_bf16_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
      "flash_bf16_forward_kernel<{}>: {} bytes of shared memory", D, bytes);
  const dim3 grid(static_cast<unsigned>(f.a.heads), static_cast<unsigned>((f.a.tq + kBlockRows - 1) / kBlockRows));
  flash_bf16_forward_kernel<D><<<grid, kThreads, bytes, stream>>>(f);
  TANDEM_CUDA_LAUNCH_CHECK("flash_bf16_forward_kernel", "D={} heads={} tq={} tk={} causal={}", D, f.a.heads, f.a.tq,
                           f.a.tk, f.a.causal);
}

}  // namespace

bool flash_bf16_head_size(int64_t d) { return d == 64 || d == 128; }

void flash_bf16_forward(const FlashBf16Args& f, cudaStream_t stream) {
  if (f.a.d == 64) return launch_forward<64>(f, stream);
  launch_forward<128>(f, stream);
}

}  // namespace tandem::backend::cuda
