// Reductions over one axis (sum, mean, max), the max's gradient, and softmax / log_softmax along an
// axis, on the GPU. x is seen as (outer, size, inner): with inner == 1 (the last axis, the common
// case) a warp takes each row and its lanes stride along it; otherwise a thread takes each
// (outer, inner) column and consecutive threads read consecutive addresses. Every sum runs in a
// fixed order (a fixed shuffle tree), so results repeat bitwise.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_reduce.cuh"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::global_thread_index;
using tandem::cuda::grid_stride;
using tandem::cuda::kFullWarp;
using tandem::cuda::kWarpSize;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

constexpr int kWarpThreads = 256;

struct Split {
  int64_t outer, size, inner;
};

Split split_at(const Shape& s, int axis) {
  Split p{1, s[axis], 1};
  for (int d = 0; d < axis; ++d) p.outer *= s[d];
  for (int d = axis + 1; d < s.rank(); ++d) p.inner *= s[d];
  return p;
}

__device__ __forceinline__ float combine(Reduction r, float a, float b) {
  if (r != Reduction::kMax) return __fadd_rn(a, b);
  return (a != a || a > b) ? a : b;  // a NaN is the max
}

// Every lane ends with the warp's combination (butterfly: the same bits in every lane).
__device__ __forceinline__ float warp_all(Reduction r, float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = combine(r, v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

__device__ __forceinline__ int64_t warp_id() { return global_thread_index() / kWarpSize; }
__device__ __forceinline__ int64_t warp_count() { return grid_stride() / kWarpSize; }

__global__ void reduce_rows_kernel(Reduction r, const float* x, float* y, int64_t rows, int64_t size) {
  const int lane = threadIdx.x % kWarpSize;
  const float start = r == Reduction::kMax ? -INFINITY : 0.0f;
  for (int64_t row = warp_id(); row < rows; row += warp_count()) {
    float acc = start;
    for (int64_t k = lane; k < size; k += kWarpSize) acc = combine(r, acc, x[row * size + k]);
    acc = warp_all(r, acc);
    if (lane == 0) y[row] = r == Reduction::kMean ? __fdiv_rn(acc, static_cast<float>(size)) : acc;
  }
}

__global__ void reduce_columns_kernel(Reduction r, Split p, const float* x, float* y) {
  const int64_t n = p.outer * p.inner;
  for (int64_t c = global_thread_index(); c < n; c += grid_stride()) {
    const int64_t o = c / p.inner, i = c - o * p.inner;
    const float* src = x + o * p.size * p.inner + i;
    float acc = r == Reduction::kMax ? -INFINITY : 0.0f;
    for (int64_t k = 0; k < p.size; ++k) acc = combine(r, acc, src[k * p.inner]);
    y[c] = r == Reduction::kMean ? __fdiv_rn(acc, static_cast<float>(p.size)) : acc;
  }
}

__global__ void max_backward_kernel(Split p, const float* x, const float* y, const float* dy, float* dx) {
  const int64_t n = p.outer * p.inner;
  for (int64_t c = global_thread_index(); c < n; c += grid_stride()) {
    const int64_t o = c / p.inner, i = c - o * p.inner;
    const int64_t base = o * p.size * p.inner + i;
    const float m = y[c];
    int64_t ties = 0;
    for (int64_t k = 0; k < p.size; ++k) ties += x[base + k * p.inner] == m;
    const float share = ties > 0 ? __fdiv_rn(dy[c], static_cast<float>(ties)) : 0.0f;
    for (int64_t k = 0; k < p.size; ++k) dx[base + k * p.inner] = x[base + k * p.inner] == m ? share : 0.0f;
  }
}

__global__ void softmax_rows_kernel(const float* x, float* y, int64_t rows, int64_t size, bool log) {
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t row = warp_id(); row < rows; row += warp_count()) {
    const float* z = x + row * size;
    float m = -INFINITY;
    for (int64_t k = lane; k < size; k += kWarpSize) m = combine(Reduction::kMax, m, z[k]);
    m = warp_all(Reduction::kMax, m);
    float s = 0.0f;
    for (int64_t k = lane; k < size; k += kWarpSize) s = __fadd_rn(s, expf(z[k] - m));
    s = warp_all(Reduction::kSum, s);
    const float log_s = logf(s);
    for (int64_t k = lane; k < size; k += kWarpSize) y[row * size + k] = log ? z[k] - m - log_s : expf(z[k] - m) / s;
  }
}

__global__ void softmax_columns_kernel(Split p, const float* x, float* y, bool log) {
  const int64_t n = p.outer * p.inner;
  for (int64_t c = global_thread_index(); c < n; c += grid_stride()) {
    const int64_t o = c / p.inner, i = c - o * p.inner;
    const int64_t base = o * p.size * p.inner + i;
    float m = -INFINITY, s = 0.0f;
    for (int64_t k = 0; k < p.size; ++k) m = combine(Reduction::kMax, m, x[base + k * p.inner]);
    for (int64_t k = 0; k < p.size; ++k) s = __fadd_rn(s, expf(x[base + k * p.inner] - m));
    const float log_s = logf(s);
    for (int64_t k = 0; k < p.size; ++k) {
      const float z = x[base + k * p.inner];
      y[base + k * p.inner] = log ? z - m - log_s : expf(z - m) / s;
    }
  }
}

// softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy).
__device__ __forceinline__ float softmax_grad(bool log, float y, float dy, float s) {
  return log ? dy - expf(y) * s : y * (dy - s);
}

__global__ void softmax_backward_rows_kernel(const float* y, const float* dy, float* dx, int64_t rows, int64_t size,
                                             bool log) {
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t row = warp_id(); row < rows; row += warp_count()) {
    const int64_t base = row * size;
    float s = 0.0f;
    for (int64_t k = lane; k < size; k += kWarpSize) s = __fadd_rn(s, log ? dy[base + k] : dy[base + k] * y[base + k]);
    s = warp_all(Reduction::kSum, s);
    for (int64_t k = lane; k < size; k += kWarpSize) dx[base + k] = softmax_grad(log, y[base + k], dy[base + k], s);
  }
}

__global__ void softmax_backward_columns_kernel(Split p, const float* y, const float* dy, float* dx, bool log) {
  const int64_t n = p.outer * p.inner;
  for (int64_t c = global_thread_index(); c < n; c += grid_stride()) {
    const int64_t o = c / p.inner, i = c - o * p.inner;
    const int64_t base = o * p.size * p.inner + i;
    float s = 0.0f;
    for (int64_t k = 0; k < p.size; ++k) {
      const int64_t at = base + k * p.inner;
      s = __fadd_rn(s, log ? dy[at] : dy[at] * y[at]);
    }
    for (int64_t k = 0; k < p.size; ++k) {
      const int64_t at = base + k * p.inner;
      dx[at] = softmax_grad(log, y[at], dy[at], s);
    }
  }
}

// Warps for `rows` rows, a warp per row up to the grid cap (grid-stride beyond).
Launch warp_launch(int64_t rows) {
  const int64_t warps_per_block = kWarpThreads / kWarpSize;
  int64_t blocks = (rows + warps_per_block - 1) / warps_per_block;
  blocks = blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks);
  return {static_cast<unsigned>(blocks), static_cast<unsigned>(kWarpThreads)};
}

}  // namespace

void reduce_axis(Ctx& ctx, Reduction r, const Tensor& x, int axis, Tensor& y) {
  const Split p = split_at(x.shape(), axis);
  if (p.outer * p.inner == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  if (p.inner == 1) {
    const Launch l = warp_launch(p.outer);
    reduce_rows_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(r, x.data<float>(), y.data<float>(), p.outer, p.size);
  } else {
    const Launch l = launch_for(p.outer * p.inner);
    reduce_columns_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(r, p, x.data<float>(), y.data<float>());
  }
  TANDEM_CUDA_LAUNCH_CHECK("reduce kernel", "op=reduce_axis x={} axis={}", x.shape().str(), axis);
}

void max_axis_backward(Ctx& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, int axis, Tensor& dx) {
  const Split p = split_at(x.shape(), axis);
  if (x.numel() == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Launch l = launch_for(p.outer * p.inner);
  max_backward_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(p, x.data<float>(), y.data<float>(), dy.data<float>(),
                                                               dx.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("max_backward_kernel", "x={} axis={}", x.shape().str(), axis);
}

void softmax(Ctx& ctx, const Tensor& x, int axis, bool log, Tensor& y) {
  const Split p = split_at(x.shape(), axis);
  if (x.numel() == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  if (p.inner == 1) {
    const Launch l = warp_launch(p.outer);
    softmax_rows_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(x.data<float>(), y.data<float>(), p.outer, p.size,
                                                                 log);
  } else {
    const Launch l = launch_for(p.outer * p.inner);
    softmax_columns_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(p, x.data<float>(), y.data<float>(), log);
  }
  TANDEM_CUDA_LAUNCH_CHECK("softmax kernel", "x={} axis={} log={}", x.shape().str(), axis, log);
}

void softmax_backward(Ctx& ctx, const Tensor& y, const Tensor& dy, int axis, bool log, Tensor& dx) {
  const Split p = split_at(y.shape(), axis);
  if (y.numel() == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  if (p.inner == 1) {
    const Launch l = warp_launch(p.outer);
    softmax_backward_rows_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(y.data<float>(), dy.data<float>(),
                                                                          dx.data<float>(), p.outer, p.size, log);
  } else {
    const Launch l = launch_for(p.outer * p.inner);
    softmax_backward_columns_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(p, y.data<float>(), dy.data<float>(),
                                                                             dx.data<float>(), log);
  }
  TANDEM_CUDA_LAUNCH_CHECK("softmax backward kernel", "y={} axis={} log={}", y.shape().str(), axis, log);
}

}  // namespace tandem::backend::cuda
