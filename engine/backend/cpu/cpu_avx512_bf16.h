// 16 activations at a time between memory and an AVX-512 register of floats, the memory f32 or
// bf16 (bf16 activations, BatchNormParams::bf16_activations), in AVX-512F alone. A bf16's bits are
// the upper half of a float's: widening is a shift; narrowing rounds to nearest even as
// tandem::float_to_bf16 does (NaN stays NaN), bit for bit. The zero-masking intrinsics stand in for
// the plain ones, whose GCC 12 headers trip -Wmaybe-uninitialized (GCC bug 105593).
#pragma once

#include <immintrin.h>

#include <bit>
#include <cstdint>

namespace tandem::backend::cpu {

constexpr __mmask16 kAllLanes = 0xFFFF;

[[gnu::target("avx512f")]] inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }

[[gnu::target("avx512f")]] inline __m512 load16(const uint16_t* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAllLanes, _mm512_maskz_cvtepu16_epi32(kAllLanes, bits), 16));
}

[[gnu::target("avx512f")]] inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }

[[gnu::target("avx512f")]] inline void store16(uint16_t* p, __m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i high = _mm512_maskz_srli_epi32(kAllLanes, u, 16);
  const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(high, _mm512_set1_epi32(1)));
  __m512i rounded = _mm512_maskz_srli_epi32(kAllLanes, _mm512_add_epi32(u, bias), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtepi32_epi16(kAllLanes, rounded));
}

inline float load1(const float* p) { return *p; }
inline float load1(const uint16_t* p) { return std::bit_cast<float>(static_cast<uint32_t>(*p) << 16); }

}  // namespace tandem::backend::cpu
