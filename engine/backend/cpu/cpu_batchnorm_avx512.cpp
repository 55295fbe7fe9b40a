// Two passes forward (moments; normalise), two backward (sums; dx): see the header. Each thread
// takes a fixed range of pixels and sums into its own row of doubles, in float over at most
// kBlockPixels values at a time; the rows are added in thread order, so a run repeats bit for bit
// for a given shape and thread budget. The moments are sums of x - x[pixel 0]: shifted by a value
// of the channel itself, a mean far from 0 costs the variance no digits.
#include "engine/backend/cpu/cpu_batchnorm_avx512.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "engine/backend/batchnorm_math.h"
#include "engine/backend/cpu/cpu_avx512_bf16.h"
#include "engine/backend/cpu/parallel.h"

#define TANDEM_AVX512 __attribute__((target("avx512f")))

namespace tandem::backend::cpu {
namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kBlockPixels = 64;

struct Geometry {
  int64_t pixels = 0, channels = 0;
  int threads = 1;
};

Geometry geometry_of(const Ctx& ctx, const Tensor& x) {
  return {x.dim(0) * x.dim(2) * x.dim(3), x.dim(1), thread_budget(ctx)};
}

// Two sums per channel, in double.
struct ChannelSums {
  std::vector<double> a, b;
};

// The zero-masking forms of the intrinsics below stand in for the plain ones, whose GCC 12 headers
// trip -Wmaybe-uninitialized wherever they are inlined (GCC bug 105593, _mm512_undefined_pd).
constexpr __mmask8 kAll8 = 0xFF;
constexpr __mmask8 kAll4 = 0x0F;

// Adds the 16 floats of v to out[0..15] in double.
TANDEM_AVX512 inline void add_to_doubles(__m512 v, double* out) {
  const __m256d lower = _mm512_maskz_extractf64x4_pd(kAll4, _mm512_castps_pd(v), 0);
  const __m256d upper = _mm512_maskz_extractf64x4_pd(kAll4, _mm512_castps_pd(v), 1);
  const __m512d lo = _mm512_maskz_cvtps_pd(kAll8, _mm256_castpd_ps(lower));
  const __m512d hi = _mm512_maskz_cvtps_pd(kAll8, _mm256_castpd_ps(upper));
  _mm512_storeu_pd(out, _mm512_add_pd(_mm512_loadu_pd(out), lo));
  _mm512_storeu_pd(out + 8, _mm512_add_pd(_mm512_loadu_pd(out + 8), hi));
}

// The lanes of v above 0 (NaN is not): the ReLU's mask, in forward and backward alike.
TANDEM_AVX512 inline __mmask16 positive(__m512 v) { return _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ); }

// The ReLU's mask of y = (x - mean) scale + beta, from centred = x - mean, computed as forward
// computed y.
TANDEM_AVX512 inline __mmask16 positive(__m512 centred, __m512 scale, __m512 beta) {
  return positive(_mm512_fmadd_ps(centred, scale, beta));
}

// y = (x - mean) scale + beta, per channel; scale = gamma invstd.
struct Affine {
  const float* mean;
  const float* scale;
  const float* beta;
};

// The kernels below take channels [c0, c0 + 16 NV) of pixels [p0, p1), NV (1 to 4) known at
// compile time so that the per-channel constants stay in registers; the sums keep kUnroll
// independent accumulators so that one channel vector per pixel is not bound by the add latency.
template <int NV>
constexpr int kUnroll = NV >= 4 ? 1 : 4 / NV;

template <int NV>
TANDEM_AVX512 inline void load_channels(const float* p, int64_t c0, __m512 (&v)[NV]) {
#pragma GCC unroll 4
  for (int j = 0; j < NV; ++j) v[j] = _mm512_loadu_ps(p + c0 + j * kLanes);
}

// Adds the kUnroll partial sums of each channel vector into out[c0 ...] in double.
template <int NV>
TANDEM_AVX512 inline void flush_sums(__m512 (&s)[kUnroll<NV>][NV], int64_t c0, double* out) {
#pragma GCC unroll 4
  for (int j = 0; j < NV; ++j) {
    __m512 total = s[0][j];
#pragma GCC unroll 4
    for (int u = 1; u < kUnroll<NV>; ++u) total = _mm512_add_ps(total, s[u][j]);
    add_to_doubles(total, out + c0 + j * kLanes);
  }
}

// What one channel vector of one pixel adds to the two sums: sa += a, sb += b1 b2.
struct SumTerms {
  __m512 a, b1, b2;
};

// The two per-channel sums of term(i, j) over pixels [p0, p1), j the channel vector and i its
// flat index, in float over blocks of kBlockPixels with kUnroll<NV> accumulators each, then added
// into sa[c0 ...] and sb[c0 ...] in double.
template <int NV, typename Term>
TANDEM_AVX512 inline void block_sums(int64_t channels, int64_t c0, int64_t p0, int64_t p1, const Term& term,
                                     double* sa, double* sb) {
  constexpr int U = kUnroll<NV>;
  for (int64_t block = p0; block < p1; block += kBlockPixels) {
    const int64_t end = std::min(block + kBlockPixels, p1);
    __m512 s[U][NV], q[U][NV];
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) s[u][j] = q[u][j] = _mm512_setzero_ps();
    }
    for (int64_t px = block; px < end; px += U) {
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) {
        if (U > 1 && px + u >= end) break;
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) {
          const SumTerms t = term((px + u) * channels + c0 + j * kLanes, j);
          s[u][j] = _mm512_add_ps(s[u][j], t.a);
          q[u][j] = _mm512_fmadd_ps(t.b1, t.b2, q[u][j]);
        }
      }
    }
    flush_sums<NV>(s, c0, sa);
    flush_sums<NV>(q, c0, sb);
  }
}

// The moments' terms: d = x - pivot, summed and squared.
template <int NV>
struct MomentTerms {
  const float* x;
  __m512 pivot[NV];
  TANDEM_AVX512 SumTerms operator()(int64_t i, int j) const {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), pivot[j]);
    return {d, d, d};
  }
};

// sum[c] += x - pivot, sumsq[c] += (x - pivot)^2.
template <int NV>
TANDEM_AVX512 void moments_block(const float* x, int64_t channels, int64_t c0, int64_t p0, int64_t p1,
                                 const float* pivot, double* sum, double* sumsq) {
  MomentTerms<NV> term{x, {}};
  load_channels<NV>(pivot, c0, term.pivot);
  block_sums<NV>(channels, c0, p0, p1, term, sum, sumsq);
}

// y = (x - mean) scale + beta (+ shortcut), clipped at 0 when clip; the shortcut (S) and y (Y) f32
// or bf16.
template <int NV, typename S, typename Y>
TANDEM_AVX512 void normalize_block(const float* x, const S* shortcut, Affine f, bool clip, int64_t channels,
                                   int64_t c0, int64_t p0, int64_t p1, Y* y) {
  __m512 m[NV], a[NV], b[NV];
  load_channels<NV>(f.mean, c0, m);
  load_channels<NV>(f.scale, c0, a);
  load_channels<NV>(f.beta, c0, b);
  for (int64_t px = p0; px < p1; ++px) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      const int64_t i = px * channels + c0 + j * kLanes;
      __m512 v = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), m[j]), a[j], b[j]);
      if (shortcut != nullptr) v = _mm512_add_ps(v, load16(shortcut + i));
      store16(y + i, clip ? _mm512_maskz_mov_ps(positive(v), v) : v);
    }
  }
}

// The gradient sums' terms: g = dy (0 where the ReLU's mask is off), summed and times x - mean.
template <int NV>
struct GradTerms {
  const float* x;
  const float* dy;
  bool relu;
  __m512 mean[NV], scale[NV], beta[NV];
  TANDEM_AVX512 SumTerms operator()(int64_t i, int j) const {
    const __m512 centred = _mm512_sub_ps(_mm512_loadu_ps(x + i), mean[j]);
    __m512 g = _mm512_loadu_ps(dy + i);
    if (relu) g = _mm512_maskz_mov_ps(positive(centred, scale[j], beta[j]), g);
    return {g, g, centred};
  }
};

// s1[c] += g, s2[c] += g (x - mean).
template <int NV>
TANDEM_AVX512 void grad_sums_block(const float* x, const float* dy, Affine f, bool relu, int64_t channels, int64_t c0,
                                   int64_t p0, int64_t p1, double* s1, double* s2) {
  GradTerms<NV> term{x, dy, relu, {}, {}, {}};
  load_channels<NV>(f.mean, c0, term.mean);
  load_channels<NV>(f.scale, c0, term.scale);
  load_channels<NV>(f.beta, c0, term.beta);
  block_sums<NV>(channels, c0, p0, p1, term, s1, s2);
}

// The per-channel constants of dx = g ka + (x - mean) kx + k0 (backward's second pass).
struct InputGradConstants {
  const float* ka;
  const float* kx;
  const float* k0;
};

// dx (f32 or bf16) over the block, g as in GradTerms.
template <int NV, typename DX>
TANDEM_AVX512 void input_grad_block(const float* x, const float* dy, Affine f, bool relu, InputGradConstants k,
                                    int64_t channels, int64_t c0, int64_t p0, int64_t p1, DX* dx) {
  __m512 m[NV], a[NV], b[NV], ka[NV], kx[NV], k0[NV];
  load_channels<NV>(f.mean, c0, m);
  load_channels<NV>(f.scale, c0, a);
  load_channels<NV>(f.beta, c0, b);
  load_channels<NV>(k.ka, c0, ka);
  load_channels<NV>(k.kx, c0, kx);
  load_channels<NV>(k.k0, c0, k0);
  for (int64_t px = p0; px < p1; ++px) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      const int64_t i = px * channels + c0 + j * kLanes;
      const __m512 centred = _mm512_sub_ps(_mm512_loadu_ps(x + i), m[j]);
      __m512 g = _mm512_loadu_ps(dy + i);
      if (relu) g = _mm512_maskz_mov_ps(positive(centred, a[j], b[j]), g);
      const __m512 rest = _mm512_fmadd_ps(centred, kx[j], k0[j]);
      store16(dx + i, _mm512_fmadd_ps(g, ka[j], rest));
    }
  }
}

// Calls f with t's elements: float*, or the bits of its bf16 values (uint16_t*).
template <typename F>
void with_elements(const Tensor& t, F f) {
  if (t.dtype() == DType::kBF16) {
    f(static_cast<uint16_t*>(t.raw_data()));
  } else {
    f(t.data<float>());
  }
}

// Calls f(std::integral_constant<int, NV>, c0) for blocks of 64 channels and the rest.
template <typename F>
void for_channel_blocks(int64_t channels, F f) {
  int64_t c0 = 0;
  for (; c0 + 4 * kLanes <= channels; c0 += 4 * kLanes) f(std::integral_constant<int, 4>{}, c0);
  switch ((channels - c0) / kLanes) {
    case 3: f(std::integral_constant<int, 3>{}, c0); break;
    case 2: f(std::integral_constant<int, 2>{}, c0); break;
    case 1: f(std::integral_constant<int, 1>{}, c0); break;
    default: break;
  }
}

// Runs f(thread, first pixel, end pixel) on the thread budget, each thread on its own range.
template <typename F>
void for_pixel_ranges(const Geometry& g, F f) {
#pragma omp parallel num_threads(g.threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    f(t, g.pixels * t / nt, g.pixels * (t + 1) / nt);
  }
}

// Two per-channel sums from f(first pixel, end pixel, a row, b row), rows added in thread order.
template <typename F>
ChannelSums channel_sums(const Geometry& g, F f) {
  const auto c = static_cast<size_t>(g.channels);
  std::vector<double> rows(2 * c * static_cast<size_t>(g.threads), 0.0);
  for_pixel_ranges(g, [&](int64_t t, int64_t p0, int64_t p1) {
    double* row = rows.data() + 2 * c * static_cast<size_t>(t);
    f(p0, p1, row, row + c);
  });
  ChannelSums out{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  for (size_t t = 0; t < static_cast<size_t>(g.threads); ++t) {
    for (size_t k = 0; k < c; ++k) {
      out.a[k] += rows[2 * c * t + k];
      out.b[k] += rows[2 * c * t + c + k];
    }
  }
  return out;
}

// Mean, invstd, running averages, and the scale of y = (x - mean) scale + beta, per channel.
void finish_moments(const BatchNormParams& p, const Geometry& g, const ChannelSums& sums, const float* pivot,
                    const float* gamma, Tensor& running_mean, Tensor& running_var,
                    BatchNormSaved& saved, float* scale) {
  const auto n = static_cast<double>(g.pixels);
  float* saved_mean = saved.mean.data<float>();
  float* saved_invstd = saved.invstd.data<float>();
  float* rm = running_mean.data<float>();
  float* rv = running_var.data<float>();
  for (int64_t c = 0; c < g.channels; ++c) {
    const auto k = static_cast<size_t>(c);
    const double offset = sums.a[k] / n;  // mean - pivot
    const double var = std::max(sums.b[k] / n - offset * offset, 0.0);
    const double mean = pivot[c] + offset;
    const float invstd = bn_math::invstd(var, p.eps);
    saved_mean[c] = static_cast<float>(mean);
    saved_invstd[c] = invstd;
    rm[c] = bn_math::running_update(rm[c], mean, p.momentum);
    rv[c] = bn_math::running_update(rv[c], var * n / (n - 1.0), p.momentum);
    scale[c] = gamma[c] * invstd;
  }
}

}  // namespace

bool avx512_batchnorm_suits(const Tensor& x) {
  return cpu_has_avx512f() && x.dtype() == DType::kF32 && x.rank() == 4 && x.format() == MemoryFormat::kChannelsLast &&
         x.dim(1) % kLanes == 0 && x.dim(1) > 0;
}

void avx512_batchnorm_training(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor* shortcut, Tensor& running_mean,
                               Tensor& running_var, Tensor& y, BatchNormSaved& saved) {
  const Geometry g = geometry_of(ctx, x);
  const float* px = x.data<float>();
  const float* pivot = px;  // pixel 0's values, channel by channel
  ChannelSums sums = channel_sums(g, [&](int64_t p0, int64_t p1, double* a, double* b) {
    for_channel_blocks(g.channels, [&](auto nv, int64_t c0) {
      moments_block<nv.value>(px, g.channels, c0, p0, p1, pivot, a, b);
    });
  });
  // The workspace keeps scale and beta: backward recomputes the ReLU's mask from them.
  saved.workspace = Tensor::empty({2 * g.channels}, DType::kF32, ctx.device());
  float* scale = saved.workspace.data<float>();
  std::copy_n(beta.data<float>(), g.channels, scale + g.channels);
  finish_moments(p, g, sums, pivot, gamma.data<float>(), running_mean, running_var, saved, scale);
  const Affine f{saved.mean.data<float>(), scale, scale + g.channels};
  const bool clip = p.fuse_relu || shortcut != nullptr;
  auto normalize = [&](const auto* ps, auto* py) {
    for_pixel_ranges(g, [&](int64_t, int64_t p0, int64_t p1) {
      for_channel_blocks(g.channels, [&](auto nv, int64_t c0) {
        normalize_block<nv.value>(px, ps, f, clip, g.channels, c0, p0, p1, py);
      });
    });
  };
  with_elements(y, [&](auto* py) {
    if (shortcut == nullptr) return normalize(static_cast<const float*>(nullptr), py);
    with_elements(*shortcut, [&](const auto* ps) { normalize(ps, py); });
  });
}

void avx512_batchnorm_backward(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& dy,
                               const Tensor& gamma, const BatchNormSaved& saved, Tensor& dx, Tensor& dgamma,
                               Tensor& dbeta) {
  const Geometry g = geometry_of(ctx, x);
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  const float* scale = saved.workspace.data<float>();
  const Affine f{saved.mean.data<float>(), scale, scale + g.channels};
  ChannelSums sums = channel_sums(g, [&](int64_t p0, int64_t p1, double* a, double* b) {
    for_channel_blocks(g.channels, [&](auto nv, int64_t c0) {
      grad_sums_block<nv.value>(px, pdy, f, p.fuse_relu, g.channels, c0, p0, p1, a, b);
    });
  });
  // dx = gamma invstd (g - s1 / n - xhat invstd s2 / n), with xhat = (x - mean) invstd.
  const auto c = static_cast<size_t>(g.channels);
  std::vector<float> k(3 * c);
  const auto n = static_cast<double>(g.pixels);
  const float* invstds = saved.invstd.data<float>();
  const float* gammas = gamma.data<float>();
  float* dg = dgamma.data<float>();
  float* db = dbeta.data<float>();
  for (size_t i = 0; i < c; ++i) {
    const double invstd = invstds[i];
    const double a = static_cast<double>(gammas[i]) * invstd;
    k[i] = static_cast<float>(a);
    k[c + i] = static_cast<float>(-a * invstd * invstd * sums.b[i] / n);
    k[2 * c + i] = static_cast<float>(-a * sums.a[i] / n);
    dg[i] = static_cast<float>(sums.b[i] * invstd);
    db[i] = static_cast<float>(sums.a[i]);
  }
  const InputGradConstants constants{k.data(), k.data() + c, k.data() + 2 * c};
  with_elements(dx, [&](auto* pdx) {
    for_pixel_ranges(g, [&](int64_t, int64_t p0, int64_t p1) {
      for_channel_blocks(g.channels, [&](auto nv, int64_t c0) {
        input_grad_block<nv.value>(px, pdy, f, p.fuse_relu, constants, g.channels, c0, p0, p1, pdx);
      });
    });
  });
}

}  // namespace tandem::backend::cpu
