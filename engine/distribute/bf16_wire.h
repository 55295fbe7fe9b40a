// Gradients all-reduced in bf16 (distribute.allreduce_dtype: bf16): half the bytes on the wire.
// Values are rounded to bf16 once before the collective; every sum is taken in f32 and rounded once
// more when it is stored: once for an in-process or ordered fold; between P processes on Gloo's ring,
// once for the fold inside each process and once per hop (P - 1); an average rounds once more.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace tandem::distribute::bf16_wire {

// Round to nearest, ties to even; NaN stays a (quiet) NaN.
inline uint16_t round(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float widen(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

inline void round_all(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = round(in[i]);
}

inline void widen_all(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = widen(in[i]);
}

}  // namespace tandem::distribute::bf16_wire
