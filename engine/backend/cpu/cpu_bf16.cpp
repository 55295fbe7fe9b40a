// f32 -> bf16 rounding for the bf16 autocast of the CPU kernels. With AVX512-BF16 one instruction
// rounds 16 floats (vcvtneps2bf16); elsewhere the same ties-to-even rule in integer arithmetic,
// which the compiler vectorises. Both give the bits of tandem::float_to_bf16, except for denormal
// inputs, which the instruction flushes to zero (and the portable tail, the last n mod 16, keeps):
// a difference far below bf16's resolution of anything a gradient or activation carries.
#include "engine/backend/cpu/cpu_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/parallel.h"

namespace tandem::backend::cpu {
namespace {

inline uint16_t round_one(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(nan ? (u >> 16) | 0x40u : rounded);
}

void round_portable(const float* in, uint16_t* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = round_one(in[i]);
}

[[gnu::target("avx512f,avx512bf16")]] void round_avx512_bf16(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    std::memcpy(out + i, &v, sizeof(v));
  }
  round_portable(in + i, out + i, n - i);
}

bool cpu_has_avx512_bf16() {
  static const bool yes = __builtin_cpu_supports("avx512bf16");
  return yes;
}

constexpr int64_t kChunk = int64_t{1} << 16;  // elements per parallel piece

}  // namespace

bool computes_in_bf16(const Ctx& ctx) { return ctx.options().precision == Precision::kBf16; }

void round_to_bf16(Ctx& ctx, const float* in, uint16_t* out, int64_t n) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const bool fast = cpu_has_avx512_bf16();
  const int threads = static_cast<int>(std::min<int64_t>(thread_budget(ctx), chunks));
#pragma omp parallel for schedule(static) num_threads(std::max(threads, 1)) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    if (fast) {
      round_avx512_bf16(in + begin, out + begin, count);
    } else {
      round_portable(in + begin, out + begin, count);
    }
  }
}

void round_to_bf16_serial(const float* in, uint16_t* out, int64_t n) {
  if (cpu_has_avx512_bf16()) {
    round_avx512_bf16(in, out, n);
  } else {
    round_portable(in, out, n);
  }
}

Tensor bf16_copy(Ctx& ctx, const Tensor& t) {
  Tensor copy = Tensor::empty(t.shape(), DType::kBF16, ctx.device(), t.format());
  round_to_bf16(ctx, t.data<float>(), static_cast<uint16_t*>(copy.raw_data()), t.numel());
  return copy;
}

Tensor bf16_of(Ctx& ctx, const Tensor& t) { return t.dtype() == DType::kBF16 ? t : bf16_copy(ctx, t); }

void to_bf16(Ctx& ctx, const Tensor& x, Tensor& y) {
  round_to_bf16(ctx, x.data<float>(), static_cast<uint16_t*>(y.raw_data()), x.numel());
}

void from_bf16(Ctx& ctx, const Tensor& x, Tensor& y) {
  const auto* in = static_cast<const uint16_t*>(x.raw_data());
  float* out = y.data<float>();
  const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
  const int threads = static_cast<int>(std::min<int64_t>(thread_budget(ctx), chunks));
#pragma omp parallel for schedule(static) num_threads(std::max(threads, 1)) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
#pragma omp simd
    for (int64_t i = c * kChunk; i < end; ++i) out[i] = std::bit_cast<float>(static_cast<uint32_t>(in[i]) << 16);
  }
}

Tensor f32_of(Ctx& ctx, const Tensor& t) {
  if (t.dtype() == DType::kF32) return t;
  Tensor copy = Tensor::empty(t.shape(), DType::kF32, ctx.device(), t.format());
  from_bf16(ctx, t, copy);
  return copy;
}

memory::desc as_bf16(const memory::desc& md) {
  dnnl_memory_desc_t raw = md.data;
  raw.data_type = dnnl_bf16;
  return memory::desc(raw);
}

}  // namespace tandem::backend::cpu
