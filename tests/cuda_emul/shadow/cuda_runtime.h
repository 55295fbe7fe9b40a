// Shadow of the CUDA runtime header for the emulator build (tests/cuda_emul): the CUDA C++
// keywords and built-ins the kernels use, mapped onto tandem_emul (emulator.h). This directory comes
// first on that build's include path, and the CUDA toolkit's headers are not on it at all.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tests/cuda_emul/emulator.h"

// Function qualifiers: every function is an ordinary host function here.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// A block runs alone (emulator.h), so a function-local static is exactly one block's shared array.
// `extern __shared__` arrays are rewritten by tools/transform_cuda.py instead.
#define __shared__ static
// What `__CUDA_ARCH__` becomes in the transformed sources: the device code of an sm_80 build.
#define TANDEM_EMUL_CUDA_ARCH 800

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "error"; }

template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attribute, int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  tandem_emul::set_max_dynamic_shared(tandem_emul::kernel_id(kernel), value);
  return cudaSuccess;
}

// float2 is 8-byte aligned on the GPU, where a misaligned float2 store faults: its assignment
// checks the alignment of the address it stores to.
struct alignas(8) float2 {
  float x, y;
  float2() = default;
  constexpr float2(float vx, float vy) : x(vx), y(vy) {}
  float2(const float2&) = default;
  float2& operator=(const float2& o) {
    if (reinterpret_cast<uintptr_t>(this) % alignof(float2) != 0) tandem_emul::fatal("a misaligned float2 store");
    x = o.x;
    y = o.y;
    return *this;
  }
};
inline float2 make_float2(float x, float y) { return {x, y}; }

inline void __syncthreads() { tandem_emul::syncthreads(); }
[[noreturn]] inline void __trap() { tandem_emul::fatal("__trap() in a kernel"); }
inline size_t __cvta_generic_to_shared(const void* p) { return tandem_emul::cvta_generic_to_shared(p); }

namespace tandem_emul::detail {
template <typename T>
T shuffle(ShuffleKind kind, unsigned mask, T v, int operand, int width) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "shuffles move 32- or 64-bit values");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = tandem_emul::shuffle(kind, mask, bits, operand, width);
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
}  // namespace tandem_emul::detail

template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return tandem_emul::detail::shuffle(tandem_emul::ShuffleKind::kXor, mask, v, lane_mask, width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return tandem_emul::detail::shuffle(tandem_emul::ShuffleKind::kDown, mask, v, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return tandem_emul::detail::shuffle(tandem_emul::ShuffleKind::kUp, mask, v, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return tandem_emul::detail::shuffle(tandem_emul::ShuffleKind::kIndex, mask, v, src_lane, width);
}
