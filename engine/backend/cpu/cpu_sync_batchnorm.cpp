// SyncBatchNorm's halves on the CPU (contracts in kernels.h): per-channel sums in double over
// either memory format, the rank-ordered merge, and the elementwise input gradient. The formulas
// are batchnorm_math.h's, shared with the CUDA kernels.
#include <omp.h>

#include <vector>

#include "engine/backend/batchnorm_math.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/parallel.h"

namespace tandem::backend::cpu {
namespace {

// Where channel c's values lie in a 4-D tensor of either memory format.
struct ChannelLayout {
  int64_t n = 0, c = 0, hw = 0;
  bool channels_last = false;
  int64_t per_channel() const { return n * hw; }
};

ChannelLayout layout_of(const Tensor& x) {
  return {x.dim(0), x.dim(1), x.dim(2) * x.dim(3), x.format() == MemoryFormat::kChannelsLast};
}


// Two sums per channel in one pass over the values: a[c] and b[c] add up f(i, c).a and .b over
// channel c's flat indices i, in double. The order of the additions depends only on the shape and
// the thread budget, so a run is reproducible. The inner loops are SIMD loops.
struct SumPair {
  double a = 0, b = 0;
};
struct ChannelSums {
  std::vector<double> a, b;
};

template <typename F>
ChannelSums channel_sums(const ChannelLayout& l, int threads, F f) {
  const auto channels = static_cast<size_t>(l.c);
  ChannelSums out{std::vector<double>(channels, 0.0), std::vector<double>(channels, 0.0)};
  if (!l.channels_last) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t c = 0; c < l.c; ++c) {
      double sa = 0.0, sb = 0.0;
      for (int64_t n = 0; n < l.n; ++n) {
        const int64_t base = (n * l.c + c) * l.hw;
#pragma omp simd reduction(+ : sa, sb)
        for (int64_t k = 0; k < l.hw; ++k) {
          const SumPair v = f(base + k, c);
          sa += v.a;
          sb += v.b;
        }
      }
      out.a[static_cast<size_t>(c)] = sa;
      out.b[static_cast<size_t>(c)] = sb;
    }
    return out;
  }
  // channels_last: each thread sums a block of pixels into its own rows of partials.
  const int64_t pixels = l.n * l.hw;
  std::vector<double> partial(static_cast<size_t>(2 * threads * l.c), 0.0);
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    double* pa = partial.data() + 2 * t * l.c;
    double* pb = pa + l.c;
    for (int64_t px = pixels * t / nt; px < pixels * (t + 1) / nt; ++px) {
#pragma omp simd
      for (int64_t c = 0; c < l.c; ++c) {
        const SumPair v = f(px * l.c + c, c);
        pa[c] += v.a;
        pb[c] += v.b;
      }
    }
  }
  for (int64_t t = 0; t < threads; ++t) {
    for (int64_t c = 0; c < l.c; ++c) {
      out.a[static_cast<size_t>(c)] += partial[static_cast<size_t>(2 * t * l.c + c)];
      out.b[static_cast<size_t>(c)] += partial[static_cast<size_t>((2 * t + 1) * l.c + c)];
    }
  }
  return out;
}

// Calls f(i, c) for every value, in parallel.
template <typename F>
void channel_map(const ChannelLayout& l, int threads, F f) {
  if (!l.channels_last) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t plane = 0; plane < l.n * l.c; ++plane) {
      const int64_t c = plane % l.c;
#pragma omp simd
      for (int64_t k = 0; k < l.hw; ++k) f(plane * l.hw + k, c);
    }
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t px = 0; px < l.n * l.hw; ++px) {
#pragma omp simd
    for (int64_t c = 0; c < l.c; ++c) f(px * l.c + c, c);
  }
}

}  // namespace

void batchnorm_moments(Ctx& ctx, const Tensor& x, Tensor& moments) {
  const ChannelLayout l = layout_of(x);
  const float* px = x.data<float>();
  const double count = static_cast<double>(l.per_channel());
  ChannelSums sums = channel_sums(l, thread_budget(ctx), [px](int64_t i, int64_t) {
    const double v = px[i];
    return SumPair{v, v * v};
  });
  float* out = moments.data<float>();
  for (int64_t c = 0; c < l.c; ++c) {
    const auto k = static_cast<size_t>(c);
    const bn_math::Moments m = bn_math::moments_from_sums(sums.a[k], sums.b[k], count);
    out[c] = static_cast<float>(m.mean);
    out[l.c + c] = static_cast<float>(m.m2);
  }
  out[2 * l.c] = static_cast<float>(count);  // exact up to 2^24 values per channel and replica
}

void batchnorm_merge_moments(Ctx&, const BatchNormParams& p, const Tensor& gathered, Tensor& running_mean,
                             Tensor& running_var, Tensor& mean, Tensor& var, Tensor& invstd, Tensor& count) {
  const int64_t channels = mean.numel(), width = 2 * channels + 1;
  const int64_t replicas = gathered.numel() / width;
  const float* g = gathered.data<float>();
  double total = 0;
  for (int64_t c = 0; c < channels; ++c) {
    bn_math::Moments m;
    for (int64_t r = 0; r < replicas; ++r) {
      const float* row = g + r * width;
      m = bn_math::merge(m, {row[2 * channels], row[c], row[channels + c]});
    }
    const double v = bn_math::biased_var(m);
    mean.data<float>()[c] = static_cast<float>(m.mean);
    var.data<float>()[c] = static_cast<float>(v);
    invstd.data<float>()[c] = bn_math::invstd(v, p.eps);
    total = m.count;
    if (m.count <= 1) continue;  // no unbiased variance: the caller reports it, the running statistics stay
    float& rm = running_mean.data<float>()[c];
    float& rv = running_var.data<float>()[c];
    rm = bn_math::running_update(rm, static_cast<float>(m.mean), p.momentum);
    rv = bn_math::running_update(rv, static_cast<float>(v) * (m.count / (m.count - 1)), p.momentum);
  }
  count.data<float>()[0] = static_cast<float>(total);
}

void batchnorm_backward_reduce(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                               const Tensor& mean, const Tensor& invstd, Tensor& sums, Tensor& dgamma, Tensor& dbeta) {
  const ChannelLayout l = layout_of(x);
  const float *px = x.data<float>(), *py = y.data<float>(), *pdy = dy.data<float>();
  const float *pm = mean.data<float>(), *ps = invstd.data<float>();
  const bool fuse = p.fuse_relu;
  ChannelSums s = channel_sums(l, thread_budget(ctx), [=](int64_t i, int64_t c) {
    const double g = bn_math::grad_out(fuse, py[i], pdy[i]);
    return SumPair{g, g * ((px[i] - pm[c]) * ps[c])};
  });
  for (int64_t c = 0; c < l.c; ++c) {
    const auto k = static_cast<size_t>(c);
    dbeta.data<float>()[c] = sums.data<float>()[c] = static_cast<float>(s.a[k]);
    dgamma.data<float>()[c] = sums.data<float>()[l.c + c] = static_cast<float>(s.b[k]);
  }
}

void batchnorm_backward_elemt(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& gamma, const Tensor& mean, const Tensor& invstd, const Tensor& sums,
                              const Tensor& count, Tensor& dx) {
  const ChannelLayout l = layout_of(x);
  const float *px = x.data<float>(), *py = y.data<float>(), *pdy = dy.data<float>();
  const float *pm = mean.data<float>(), *ps = invstd.data<float>(), *pg = gamma.data<float>();
  const float* global = sums.data<float>();
  float* pdx = dx.data<float>();
  const float inv_count = static_cast<float>(1.0 / static_cast<double>(count.data<float>()[0]));
  const bool fuse = p.fuse_relu;
  const int64_t channels = l.c;
  channel_map(l, thread_budget(ctx), [=](int64_t i, int64_t c) {
    const float xhat = (px[i] - pm[c]) * ps[c];
    pdx[i] = bn_math::input_grad(bn_math::grad_out(fuse, py[i], pdy[i]), xhat, pg[c], ps[c], global[c],
                                 global[channels + c], inv_count);
  });
}

}  // namespace tandem::backend::cpu
