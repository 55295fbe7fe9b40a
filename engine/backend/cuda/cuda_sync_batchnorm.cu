// SyncBatchNorm's halves on the GPU (contracts in kernels.h; the formulas are batchnorm_math.h's,
// which the CPU kernels run too). Per-channel sums take two launches and no atomics: blocks of 32
// channels x 8 rows each sum one chunk of pixels into a double partial per channel, then one thread
// per channel adds the chunks' partials in chunk order. The chunk count depends on the shape only,
// so a result repeats bitwise from run to run. Lanes of a warp take neighbouring channels: loads
// coalesce in channels_last (the GPU default); NCHW is correct but strided.
//
// y (read for a fused ReLU's mask) and dx may be bf16 as well as f32: batch norm with bf16
// activations (cuda_batchnorm_bf16.cu) runs its backward through these two kernels.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/batchnorm_math.h"
#include "engine/backend/cuda/cuda_bf16_access.cuh"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_reduce.cuh"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::global_thread_index;
using tandem::cuda::grid_stride;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

// x as the kernels read it: f32, or the bf16 output of a convolution (bf16 activations).
F32OrBf16 x_of(const Tensor& x) { return {x.raw_data(), x.dtype() == DType::kBF16}; }

constexpr int kTileChannels = 32;  // threadIdx.x: one channel of the block's tile
constexpr int kRows = 8;           // threadIdx.y: pixels strided by kRows within the chunk
constexpr int64_t kPixelsPerChunk = 1024;
constexpr int64_t kMaxChunks = 1024;

// Where the value of (pixel p = (n H + h) W + w, channel c) lies, in either memory format.
struct Layout {
  int64_t channels, hw, pixels;
  bool channels_last;
  __device__ int64_t index(int64_t p, int64_t c) const {
    return channels_last ? p * channels + c : ((p / hw) * channels + c) * hw + p % hw;
  }
  __device__ int64_t channel_of(int64_t i) const { return channels_last ? i % channels : (i / hw) % channels; }
};

Layout layout_of(const Tensor& x) {
  const int64_t hw = x.dim(2) * x.dim(3);
  return {x.dim(1), hw, x.dim(0) * hw, x.format() == MemoryFormat::kChannelsLast};
}

// partials[chunk * C + c] = (sum of f(i, c).x, sum of f(i, c).y) over the chunk's pixels.
template <typename F>
__global__ void channel_partials_kernel(Layout l, int64_t chunk_pixels, F f, double2* partials) {
  __shared__ double2 rows[kRows][kTileChannels];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTileChannels + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk_pixels;
  const int64_t end = begin + chunk_pixels < l.pixels ? begin + chunk_pixels : l.pixels;
  double2 acc = make_double2(0.0, 0.0);
  if (c < l.channels) {
    for (int64_t p = begin + threadIdx.y; p < end; p += kRows) {
      const double2 v = f(l.index(p, c), c);
      acc.x += v.x;
      acc.y += v.y;
    }
  }
  rows[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= l.channels) return;
  for (int r = 1; r < kRows; ++r) {  // a fixed order: repeatable
    acc.x += rows[r][threadIdx.x].x;
    acc.y += rows[r][threadIdx.x].y;
  }
  partials[static_cast<int64_t>(blockIdx.y) * l.channels + c] = acc;
}

struct MomentsTerm {  // (x, x^2)
  F32OrBf16 x;
  __device__ double2 operator()(int64_t i, int64_t) const {
    const double v = x[i];
    return make_double2(v, v * v);
  }
};

template <typename Y>
struct GradTerm {  // (g, g xhat)
  F32OrBf16 x;
  const Y* y;
  const float *dy, *mean, *invstd;
  bool fuse_relu;
  __device__ double2 operator()(int64_t i, int64_t c) const {
    const double g = bn_math::grad_out(fuse_relu, widen(y[i]), dy[i]);
    const float xhat = __fmul_rn(__fsub_rn(x[i], mean[c]), invstd[c]);
    return make_double2(g, g * xhat);
  }
};

// The sums of both terms per channel, accumulated over the chunks in order.
__device__ double2 chunk_total(const double2* partials, int64_t chunks, int64_t channels, int64_t c) {
  double2 total = make_double2(0.0, 0.0);
  for (int64_t k = 0; k < chunks; ++k) {
    const double2 v = partials[k * channels + c];
    total.x += v.x;
    total.y += v.y;
  }
  return total;
}

__global__ void moments_finish_kernel(const double2* partials, int64_t chunks, int64_t channels, double count,
                                      float* moments) {
  for (int64_t c = global_thread_index(); c < channels; c += grid_stride()) {
    const double2 s = chunk_total(partials, chunks, channels, c);
    const bn_math::Moments m = bn_math::moments_from_sums(s.x, s.y, count);
    moments[c] = static_cast<float>(m.mean);
    moments[channels + c] = static_cast<float>(m.m2);
    if (c == 0) moments[2 * channels] = static_cast<float>(count);
  }
}

__global__ void grad_sums_finish_kernel(const double2* partials, int64_t chunks, int64_t channels, float* sums,
                                        float* dgamma, float* dbeta) {
  for (int64_t c = global_thread_index(); c < channels; c += grid_stride()) {
    const double2 s = chunk_total(partials, chunks, channels, c);
    dbeta[c] = sums[c] = static_cast<float>(s.x);
    dgamma[c] = sums[channels + c] = static_cast<float>(s.y);
  }
}

struct MergeArgs {
  const float* gathered;
  int64_t replicas, channels;
  float eps, momentum;
  float *running_mean, *running_var, *mean, *var, *invstd, *count;
};

__global__ void merge_kernel(MergeArgs a) {
  const int64_t width = 2 * a.channels + 1;
  for (int64_t c = global_thread_index(); c < a.channels; c += grid_stride()) {
    bn_math::Moments m;
    for (int64_t r = 0; r < a.replicas; ++r) {  // rank order, as on every other replica
      const float* row = a.gathered + r * width;
      m = bn_math::merge(m, {row[2 * a.channels], row[c], row[a.channels + c]});
    }
    const double v = bn_math::biased_var(m);
    a.mean[c] = static_cast<float>(m.mean);
    a.var[c] = static_cast<float>(v);
    a.invstd[c] = bn_math::invstd(v, a.eps);
    if (c == 0) *a.count = static_cast<float>(m.count);
    if (m.count <= 1) continue;  // no unbiased variance: the caller reports it, the running statistics stay
    a.running_mean[c] = bn_math::running_update(a.running_mean[c], static_cast<float>(m.mean), a.momentum);
    a.running_var[c] =
        bn_math::running_update(a.running_var[c], static_cast<float>(v) * (m.count / (m.count - 1)), a.momentum);
  }
}

template <typename Y, typename DX>
struct ElemtArgs {
  Layout layout;
  bool fuse_relu;
  F32OrBf16 x;
  const Y* y;
  const float *dy, *gamma, *mean, *invstd, *sums, *count;
  DX* dx;
  int64_t n;
};

template <typename Y, typename DX>
__global__ void elemt_kernel(ElemtArgs<Y, DX> a) {
  const float inv_count = static_cast<float>(1.0 / static_cast<double>(*a.count));
  const int64_t channels = a.layout.channels;
  for (int64_t i = global_thread_index(); i < a.n; i += grid_stride()) {
    const int64_t c = a.layout.channel_of(i);
    const float xhat = __fmul_rn(__fsub_rn(a.x[i], a.mean[c]), a.invstd[c]);
    store(a.dx + i, bn_math::input_grad(bn_math::grad_out(a.fuse_relu, widen(a.y[i]), a.dy[i]), xhat, a.gamma[c],
                                        a.invstd[c], a.sums[c], a.sums[channels + c], inv_count));
  }
}

// Launches the partial sums of f over x's layout into the context's workspace; returns them and
// sets chunks. ops_sync_batchnorm.cpp guarantees at least one channel.
template <typename F>
const double2* channel_partials(CudaContext& cc, const Layout& l, F f, int64_t& chunks, const char* op) {
  chunks = (l.pixels + kPixelsPerChunk - 1) / kPixelsPerChunk;
  chunks = chunks < 1 ? 1 : (chunks > kMaxChunks ? kMaxChunks : chunks);
  const int64_t chunk_pixels = (l.pixels + chunks - 1) / chunks;
  auto* partials = static_cast<double2*>(cc.workspace(sizeof(double2) * static_cast<size_t>(chunks * l.channels)));
  const dim3 grid(static_cast<unsigned>((l.channels + kTileChannels - 1) / kTileChannels),
                  static_cast<unsigned>(chunks));
  channel_partials_kernel<<<grid, dim3(kTileChannels, kRows), 0, cc.stream()>>>(l, chunk_pixels, f, partials);
  TANDEM_CUDA_LAUNCH_CHECK("channel_partials_kernel", "op={} channels={} pixels={} chunks={}", op, l.channels,
                           l.pixels, chunks);
  return partials;
}

}  // namespace

void batchnorm_moments(Ctx& ctx, const Tensor& x, Tensor& moments) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Layout l = layout_of(x);
  int64_t chunks = 0;
  const double2* partials = channel_partials(cc, l, MomentsTerm{x_of(x)}, chunks, "batchnorm_moments");
  const Launch f = launch_for(l.channels);
  moments_finish_kernel<<<f.blocks, f.threads, 0, cc.stream()>>>(partials, chunks, l.channels,
                                                                  static_cast<double>(l.pixels), moments.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("moments_finish_kernel", "op=batchnorm_moments x={} {}", x.shape().str(),
                           memory_format_name(x.format()));
}

void batchnorm_merge_moments(Ctx& ctx, const BatchNormParams& p, const Tensor& gathered, Tensor& running_mean,
                             Tensor& running_var, Tensor& mean, Tensor& var, Tensor& invstd, Tensor& count) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t channels = mean.numel();
  const MergeArgs args{gathered.data<float>(),
                       gathered.numel() / (2 * channels + 1),
                       channels,
                       p.eps,
                       p.momentum,
                       running_mean.data<float>(),
                       running_var.data<float>(),
                       mean.data<float>(),
                       var.data<float>(),
                       invstd.data<float>(),
                       count.data<float>()};
  const Launch l = launch_for(channels);
  merge_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(args);
  TANDEM_CUDA_LAUNCH_CHECK("merge_kernel", "op=batchnorm_merge_moments replicas={} channels={}", args.replicas,
                           channels);
}

namespace {

template <typename Y>
void backward_reduce(CudaContext& cc, const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const Tensor& mean, const Tensor& invstd, Tensor& sums, Tensor& dgamma, Tensor& dbeta) {
  const Layout l = layout_of(x);
  const GradTerm<Y> term{.x = x_of(x),
                         .y = static_cast<const Y*>(y.raw_data()),
                         .dy = dy.data<float>(),
                         .mean = mean.data<float>(),
                         .invstd = invstd.data<float>(),
                         .fuse_relu = p.fuse_relu};
  int64_t chunks = 0;
  const double2* partials = channel_partials(cc, l, term, chunks, "batchnorm_backward_reduce");
  const Launch f = launch_for(l.channels);
  grad_sums_finish_kernel<<<f.blocks, f.threads, 0, cc.stream()>>>(partials, chunks, l.channels, sums.data<float>(),
                                                                    dgamma.data<float>(), dbeta.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("grad_sums_finish_kernel", "op=batchnorm_backward_reduce x={} {} y={}", x.shape().str(),
                           memory_format_name(x.format()), dtype_name(y.dtype()));
}

template <typename Y, typename DX>
void backward_elemt(CudaContext& cc, const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                    const Tensor& gamma, const Tensor& mean, const Tensor& invstd, const Tensor& sums,
                    const Tensor& count, Tensor& dx) {
  const ElemtArgs<Y, DX> args{.layout = layout_of(x),
                              .fuse_relu = p.fuse_relu,
                              .x = x_of(x),
                              .y = static_cast<const Y*>(y.raw_data()),
                              .dy = dy.data<float>(),
                              .gamma = gamma.data<float>(),
                              .mean = mean.data<float>(),
                              .invstd = invstd.data<float>(),
                              .sums = sums.data<float>(),
                              .count = count.data<float>(),
                              .dx = static_cast<DX*>(dx.raw_data()),
                              .n = x.numel()};
  if (args.n == 0) return;
  const Launch l = launch_for(args.n);
  elemt_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(args);
  TANDEM_CUDA_LAUNCH_CHECK("elemt_kernel", "op=batchnorm_backward_elemt x={} {} y={} dx={}", x.shape().str(),
                           memory_format_name(x.format()), dtype_name(y.dtype()), dtype_name(dx.dtype()));
}

bool is_bf16(const Tensor& t) { return t.dtype() == DType::kBF16; }

}  // namespace

void batchnorm_backward_reduce(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                               const Tensor& mean, const Tensor& invstd, Tensor& sums, Tensor& dgamma, Tensor& dbeta) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  if (is_bf16(y)) return backward_reduce<__nv_bfloat16>(cc, p, x, y, dy, mean, invstd, sums, dgamma, dbeta);
  backward_reduce<float>(cc, p, x, y, dy, mean, invstd, sums, dgamma, dbeta);
}

void batchnorm_backward_elemt(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& gamma, const Tensor& mean, const Tensor& invstd, const Tensor& sums,
                              const Tensor& count, Tensor& dx) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  using B = __nv_bfloat16;
  if (is_bf16(y) && is_bf16(dx)) return backward_elemt<B, B>(cc, p, x, y, dy, gamma, mean, invstd, sums, count, dx);
  if (is_bf16(y)) return backward_elemt<B, float>(cc, p, x, y, dy, gamma, mean, invstd, sums, count, dx);
  if (is_bf16(dx)) return backward_elemt<float, B>(cc, p, x, y, dy, gamma, mean, invstd, sums, count, dx);
  backward_elemt<float, float>(cc, p, x, y, dy, gamma, mean, invstd, sums, count, dx);
}

}  // namespace tandem::backend::cuda
