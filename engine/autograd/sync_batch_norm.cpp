// SyncBatchNorm: each replica reduces its own batch to per-channel (mean, M2, count), the
// replicas exchange those, and every replica combines them in rank order (Chan et al.'s
// pairwise update, in double), so the global statistics are bitwise equal everywhere. The
// normalisation itself is the backend's inference kernel fed with the global statistics.
// The per-channel reductions are host loops: the statistics must leave the kernel between
// its two halves, which no single backend kernel allows. CPU replicas only, for now.
#include "engine/autograd/sync_batch_norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "engine/backend/ops.h"

namespace tandem::autograd {
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

int thread_budget(const ExecutionContext& ctx) {
  return ctx.num_threads() > 0 ? ctx.num_threads() : omp_get_max_threads();
}

// Two sums per channel in one pass over the values: a[c] and b[c] add up f(i, c).a and .b over
// channel c's flat indices i, in double. The order of the additions depends only on the shape and
// the thread budget, so a run is reproducible. The inner loops are SIMD loops: this is the cost
// of SyncBatchNorm beyond the backend's own kernel.
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

struct GlobalStats {
  Tensor mean, var, invstd;  // (C) f32: global mean, biased variance, 1 / sqrt(var + eps)
  double count = 0;          // values per channel over every replica
};

// This replica's (mean, M2, count) per channel, packed as [mean (C), M2 (C), count]. One pass of
// double sums: M2 = sum x^2 - sum x * mean loses digits only when |mean| / std is above ~1e4.
Tensor local_moments(const Tensor& x, const ChannelLayout& l, int threads) {
  const float* px = x.data<float>();
  const double n = static_cast<double>(l.per_channel());
  ChannelSums sums = channel_sums(l, threads, [px](int64_t i, int64_t) {
    const double v = px[i];
    return SumPair{v, v * v};
  });
  Tensor packed = Tensor::empty({2 * l.c + 1});
  float* p = packed.data<float>();
  for (int64_t c = 0; c < l.c; ++c) {
    const double sum = sums.a[static_cast<size_t>(c)], mean = n > 0 ? sum / n : 0.0;
    p[c] = static_cast<float>(mean);
    p[l.c + c] = static_cast<float>(std::max(0.0, sums.b[static_cast<size_t>(c)] - sum * mean));
  }
  p[2 * l.c] = static_cast<float>(n);  // exact up to 2^24 values per channel and replica
  return packed;
}

GlobalStats global_stats(const Tensor& x, const ChannelLayout& l, int threads, float eps, ReplicaReducer& reducer) {
  Tensor local = local_moments(x, l, threads);
  const int64_t width = 2 * l.c + 1;
  const int replicas = reducer.world_size();
  Tensor all = Tensor::empty({replicas * width});
  reducer.all_gather(local, all);
  GlobalStats s{Tensor::empty({l.c}), Tensor::empty({l.c}), Tensor::empty({l.c}), 0.0};
  const float* g = all.data<float>();
  for (int r = 0; r < replicas; ++r) s.count += g[r * width + 2 * l.c];
  TANDEM_CHECK(s.count > 1, ErrorCode::kInvalidArgument,
               "SyncBatchNorm: {} value(s) per channel across {} replicas; training needs more than 1 (x is {})",
               s.count, replicas, x.describe());
  for (int64_t c = 0; c < l.c; ++c) {
    double n = 0, mean = 0, m2 = 0;
    for (int r = 0; r < replicas; ++r) {  // Chan et al.: merge (n, mean, m2) with replica r's
      const float* p = g + r * width;
      const double nb = p[2 * l.c];
      if (nb == 0) continue;
      const double delta = p[c] - mean, total = n + nb;
      mean += delta * nb / total;
      m2 += p[l.c + c] + delta * delta * n * nb / total;
      n = total;
    }
    const double var = m2 / n;
    s.mean.data<float>()[c] = static_cast<float>(mean);
    s.var.data<float>()[c] = static_cast<float>(var);
    s.invstd.data<float>()[c] = static_cast<float>(1.0 / std::sqrt(var + eps));
  }
  return s;
}

void update_running(const GlobalStats& s, float momentum, Tensor& running_mean, Tensor& running_var) {
  float* rm = running_mean.data<float>();
  float* rv = running_var.data<float>();
  const double unbias = s.count / (s.count - 1);
  for (int64_t c = 0; c < running_mean.numel(); ++c) {
    rm[c] = static_cast<float>((1.0 - momentum) * rm[c] + momentum * double{s.mean.data<float>()[c]});
    rv[c] = static_cast<float>((1.0 - momentum) * rv[c] + momentum * double{s.var.data<float>()[c]} * unbias);
  }
}

struct SyncSaved {
  Tensor x, y, gamma, mean, invstd;
  double count = 0;
  backend::BatchNormParams params;
  bool need_dx = true;
};

std::vector<Tensor> sync_backward(const ExecutionContext& ctx, const SyncSaved& s, const Tensor& dy_in,
                                  ReplicaReducer& reducer) {
  const ChannelLayout l = layout_of(s.x);
  const int threads = thread_budget(ctx);
  Tensor dy = dy_in.format() == s.x.format() ? dy_in : dy_in.to_format(s.x.format());
  const float *px = s.x.data<float>(), *py = s.y.data<float>(), *pdy = dy.data<float>();
  const float *mean = s.mean.data<float>(), *invstd = s.invstd.data<float>(), *gamma = s.gamma.data<float>();
  const bool fused = s.params.fuse_relu;
  auto grad_out = [=](int64_t i) { return fused && py[i] <= 0.0f ? 0.0f : pdy[i]; };  // through the fused ReLU
  auto xhat = [=](int64_t i, int64_t c) { return (px[i] - mean[c]) * invstd[c]; };
  ChannelSums sums = channel_sums(l, threads, [&](int64_t i, int64_t c) {
    const double g = grad_out(i);
    return SumPair{g, g * xhat(i, c)};
  });
  Tensor dgamma = Tensor::empty({l.c}), dbeta = Tensor::empty({l.c});
  Tensor global = Tensor::empty({2 * l.c});
  for (int64_t c = 0; c < l.c; ++c) {
    dbeta.data<float>()[c] = static_cast<float>(sums.a[static_cast<size_t>(c)]);   // local: the buckets
    dgamma.data<float>()[c] = static_cast<float>(sums.b[static_cast<size_t>(c)]);  // sum them
    global.data<float>()[c] = dbeta.data<float>()[c];
    global.data<float>()[l.c + c] = dgamma.data<float>()[c];
  }
  reducer.all_reduce_sum(global);  // every replica, need_dx or not, so the collectives stay in step
  if (!s.need_dx) return {Tensor(), dgamma, dbeta};
  Tensor dx = Tensor::empty(s.x.shape(), DType::kF32, s.x.device(), s.x.format());
  float* pdx = dx.data<float>();
  const float* g = global.data<float>();
  const float inv_n = static_cast<float>(1.0 / s.count);
  channel_map(l, threads, [&](int64_t i, int64_t c) {
    pdx[i] = gamma[c] * invstd[c] * (grad_out(i) - g[c] * inv_n - xhat(i, c) * g[l.c + c] * inv_n);
  });
  return {dx, dgamma, dbeta};
}

}  // namespace

Variable sync_batch_norm_training(ExecutionContext& ctx, const Variable& x, const Variable& gamma,
                                  const Variable& beta, Tensor& running_mean, Tensor& running_var,
                                  const backend::BatchNormParams& params, ReplicaReducer& reducer) {
  const Tensor& xv = x.value();
  TANDEM_CHECK(xv.defined() && xv.rank() == 4 && xv.dtype() == DType::kF32 && xv.device().is_cpu(),
               ErrorCode::kUnimplemented,
               "SyncBatchNorm takes f32 (N, C, H, W) tensors on CPU replicas so far, got {}; on other devices set "
               "distribute.sync_batchnorm: false",
               xv.defined() ? xv.describe() : std::string("undefined"));
  const ChannelLayout l = layout_of(xv);
  const std::initializer_list<const Tensor*> per_channel{&gamma.value(), &beta.value(), &running_mean, &running_var};
  for (const Tensor* t : per_channel) {
    TANDEM_CHECK(t->dtype() == DType::kF32 && t->numel() == l.c && t->device().is_cpu(), ErrorCode::kInvalidArgument,
                 "SyncBatchNorm: expected f32[{}] cpu per-channel tensors for x {}, got {}", l.c, xv.describe(),
                 t->describe());
  }
  GlobalStats s = global_stats(xv, l, thread_budget(ctx), params.eps, reducer);
  update_running(s, params.momentum, running_mean, running_var);
  Tensor y = backend::batchnorm_forward_inference(ctx, params, xv, gamma.value(), beta.value(), s.mean, s.var);
  SyncSaved saved{xv, y, gamma.value(), s.mean, s.invstd, s.count, params, x.requires_grad()};
  return make_op("sync_batch_norm", std::move(y), {x, gamma, beta},
                 [&ctx, &reducer, saved](const Tensor& dy) { return sync_backward(ctx, saved, dy, reducer); });
}

}  // namespace tandem::autograd
