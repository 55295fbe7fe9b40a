// Tensor-core building blocks of the bf16 attention kernels (cuda_flash_bf16_*.cu), on the warp-level
// mma.sync m16n8k16 instruction (sm_80 and newer): bf16 operands, f32 accumulation. Fragment
// layouts, for lane = 4 g + t (g = lane / 4, t = lane % 4), as the PTX ISA defines them:
//   A (16 x 16, row-major)  a[0] = (g, 2t..2t+1)  a[1] = (g+8, 2t..)  a[2] = (g, 2t+8..)  a[3] = (g+8, 2t+8..)
//   B (16 x 8, k by n)      b[0] = (k 2t..2t+1, n g)                  b[1] = (k 2t+8..2t+9, n g)
//   C (16 x 8, f32)         c[0..1] = (g, 2t..2t+1)                   c[2..3] = (g+8, 2t..2t+1)
// Two adjacent C tiles (columns 0-7 and 8-15) hold exactly an A fragment's elements, which is how a
// probability tile computed by one product feeds the next without leaving registers.
// Shared-memory tiles are bf16 rows with a pitch of D + 8 elements: the 32-bit fragment loads of a
// warp and each 8-row phase of ldmatrix then touch 32 distinct banks.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace tandem::backend::cuda::mma {

// Two f32 values as a bf16 pair in one register, the lower column in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// c += a b on the tensor cores.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // the host launches these kernels on sm_80 and newer only (flash_bf16_available)
#endif
}

// The 32-bit word holding elements (row, col) and (row, col + 1) of a bf16 tile with this pitch.
__device__ __forceinline__ uint32_t word(const __nv_bfloat16* tile, int pitch, int row, int col) {
  return *reinterpret_cast<const uint32_t*>(tile + row * pitch + col);
}

// The A fragment of rows [r0, r0 + 16) and columns [c0, c0 + 16) of a row-major tile.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const __nv_bfloat16* tile, int pitch, int r0, int c0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  a[0] = word(tile, pitch, r0 + g, c0 + 2 * t);
  a[1] = word(tile, pitch, r0 + g + 8, c0 + 2 * t);
  a[2] = word(tile, pitch, r0 + g, c0 + 2 * t + 8);
  a[3] = word(tile, pitch, r0 + g + 8, c0 + 2 * t + 8);
}

// The B fragment of a product with M^T, M row-major (n by k): n = rows [n0, n0 + 8) of the tile,
// k = its columns [k0, k0 + 16). S = Q K^T takes K this way.
__device__ __forceinline__ void load_b_rows(uint32_t (&b)[2], const __nv_bfloat16* tile, int pitch, int n0, int k0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  b[0] = word(tile, pitch, n0 + g, k0 + 2 * t);
  b[1] = word(tile, pitch, n0 + g, k0 + 2 * t + 8);
}

// The B fragments of a product with M, M row-major (k by n), for k = rows [k0, k0 + 16) and the two
// column blocks [n0, n0 + 8) (b[0..1]) and [n0 + 8, n0 + 16) (b[2..3]): ldmatrix's transposing load,
// each lane giving one 16-byte row address. O = P V takes V this way.
__device__ __forceinline__ void load_b_cols_x2(uint32_t (&b)[4], const __nv_bfloat16* tile, int pitch, int k0, int n0) {
  const int lane = threadIdx.x % 32;
  const __nv_bfloat16* row = tile + (k0 + lane % 16) * pitch + n0 + (lane / 16) * 8;
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(address));
}

// The A fragment for k columns [16 s, 16 s + 16) of a 16-row product, from the two C tiles 2 s and
// 2 s + 1 that hold those columns (see the layouts above), rounded to bf16.
__device__ __forceinline__ void a_from_c(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// Asynchronous 16-byte copy from global to shared memory (sm_80); zero-fills when !valid.
__device__ __forceinline__ void copy_16(void* shared, const void* global, bool valid) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  const int bytes = valid ? 16 : 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global), "r"(bytes));
#else
  (void)address;
  (void)bytes;
  __trap();
#endif
}

__device__ __forceinline__ void copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most `pending` committed groups of this thread are still in flight.
template <int pending>
__device__ __forceinline__ void copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
#endif
}

}  // namespace tandem::backend::cuda::mma
