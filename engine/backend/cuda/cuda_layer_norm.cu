// Layer normalisation over rows on the GPU: a warp per row for the statistics, the output (f32, or
// bf16 rounded as it is stored) and the input gradient (two passes over the row: the mean, then the variance about it); the weight and
// bias gradients are column sums over every row, taken in two deterministic stages (32 columns x
// 8 rows per block sum a chunk of rows, then one thread per column adds the chunks in order).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

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
using tandem::cuda::kFullWarp;
using tandem::cuda::kWarpSize;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

constexpr int kThreads = 256;
constexpr int kTileColumns = 32, kTileRows = 8;
constexpr int64_t kRowsPerChunk = 256;

__device__ __forceinline__ float warp_all_sum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

__device__ __forceinline__ int64_t warp_id() { return global_thread_index() / kWarpSize; }
__device__ __forceinline__ int64_t warp_count() { return grid_stride() / kWarpSize; }

struct Forward {
  const float *x, *gamma, *beta;
  void* y;       // f32, or bf16 when y_bf16 (a transformer's norm feeding linear layers), rounded once
  bool y_bf16;
  float *mean, *var;
  int64_t rows, n;
  float eps;
};

__global__ void forward_kernel(Forward a) {
  const int lane = threadIdx.x % kWarpSize;
  const float inv_n = 1.0f / static_cast<float>(a.n);
  for (int64_t row = warp_id(); row < a.rows; row += warp_count()) {
    const float* x = a.x + row * a.n;
    float s = 0.0f;
    for (int64_t j = lane; j < a.n; j += kWarpSize) s += x[j];
    const float mean = warp_all_sum(s) * inv_n;
    float q = 0.0f;
    for (int64_t j = lane; j < a.n; j += kWarpSize) q += (x[j] - mean) * (x[j] - mean);
    const float var = warp_all_sum(q) * inv_n;
    const float rstd = rsqrtf(var + a.eps);
    for (int64_t j = lane; j < a.n; j += kWarpSize) {
      float v = (x[j] - mean) * rstd;
      if (a.gamma != nullptr) v *= a.gamma[j];
      if (a.beta != nullptr) v += a.beta[j];
      if (a.y_bf16) {
        store(static_cast<__nv_bfloat16*>(a.y) + row * a.n + j, v);
      } else {
        static_cast<float*>(a.y)[row * a.n + j] = v;
      }
    }
    if (lane == 0) {
      a.mean[row] = mean;
      a.var[row] = var;
    }
  }
}

struct Backward {
  const float *x, *dy, *gamma, *mean, *var;
  float* dx;
  int64_t rows, n;
  float eps;
};

// dx = rstd (g dy - mean(g dy) - xhat mean(g dy xhat)), g = gamma or 1.
__global__ void backward_data_kernel(Backward a) {
  const int lane = threadIdx.x % kWarpSize;
  const float inv_n = 1.0f / static_cast<float>(a.n);
  for (int64_t row = warp_id(); row < a.rows; row += warp_count()) {
    const float* x = a.x + row * a.n;
    const float* dy = a.dy + row * a.n;
    const float mean = a.mean[row], rstd = rsqrtf(a.var[row] + a.eps);
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t j = lane; j < a.n; j += kWarpSize) {
      const float g = a.gamma != nullptr ? a.gamma[j] * dy[j] : dy[j];
      s1 += g;
      s2 += g * (x[j] - mean) * rstd;
    }
    const float m1 = warp_all_sum(s1) * inv_n, m2 = warp_all_sum(s2) * inv_n;
    float* dx = a.dx + row * a.n;
    for (int64_t j = lane; j < a.n; j += kWarpSize) {
      const float g = a.gamma != nullptr ? a.gamma[j] * dy[j] : dy[j];
      dx[j] = rstd * (g - m1 - (x[j] - mean) * rstd * m2);
    }
  }
}

// partials[chunk][j] = (sum of dy xhat, sum of dy) over the chunk's rows of column j.
__global__ void column_partials_kernel(Backward a, int64_t chunk_rows, float2* partials) {
  __shared__ float2 tile[kTileRows][kTileColumns];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kTileColumns + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t end = begin + chunk_rows < a.rows ? begin + chunk_rows : a.rows;
  float2 acc = make_float2(0.0f, 0.0f);
  if (j < a.n) {
    for (int64_t row = begin + threadIdx.y; row < end; row += kTileRows) {
      const float d = a.dy[row * a.n + j];
      acc.x += d * (a.x[row * a.n + j] - a.mean[row]) * rsqrtf(a.var[row] + a.eps);
      acc.y += d;
    }
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || j >= a.n) return;
  for (int r = 1; r < kTileRows; ++r) {  // a fixed order: repeatable
    acc.x += tile[r][threadIdx.x].x;
    acc.y += tile[r][threadIdx.x].y;
  }
  partials[static_cast<int64_t>(blockIdx.y) * a.n + j] = acc;
}

__global__ void column_finish_kernel(const float2* partials, int64_t chunks, int64_t n, float* dgamma, float* dbeta) {
  for (int64_t j = global_thread_index(); j < n; j += grid_stride()) {
    float2 total = make_float2(0.0f, 0.0f);
    for (int64_t c = 0; c < chunks; ++c) {
      total.x += partials[c * n + j].x;
      total.y += partials[c * n + j].y;
    }
    if (dgamma != nullptr) dgamma[j] = total.x;
    if (dbeta != nullptr) dbeta[j] = total.y;
  }
}

Launch warp_launch(int64_t rows) {
  int64_t blocks = (rows * kWarpSize + kThreads - 1) / kThreads;
  blocks = blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks);
  return {static_cast<unsigned>(blocks), static_cast<unsigned>(kThreads)};
}

}  // namespace

void layer_norm_forward(Ctx& ctx, float eps, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                        Tensor& mean, Tensor& var) {
  const int64_t n = x.dim(1), rows = x.dim(0);
  if (rows * n == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Forward a{x.data<float>(),
                  gamma.defined() ? gamma.data<float>() : nullptr,
                  beta.defined() ? beta.data<float>() : nullptr,
                  y.raw_data(),
                  y.dtype() == DType::kBF16,
                  mean.data<float>(),
                  var.data<float>(),
                  rows,
                  n,
                  eps};
  const Launch l = warp_launch(rows);
  forward_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(a);
  TANDEM_CUDA_LAUNCH_CHECK("layer_norm forward_kernel", "x={} eps={} y={}", x.shape().str(), eps,
                           dtype_name(y.dtype()));
}

void layer_norm_backward(Ctx& ctx, float eps, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                         const Tensor& mean, const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const int64_t n = x.dim(1), rows = x.dim(0);
  if (rows * n == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Backward a{x.data<float>(),    dy.data<float>(), gamma.defined() ? gamma.data<float>() : nullptr,
                   mean.data<float>(), var.data<float>(), dx.data<float>(), rows, n, eps};
  const Launch l = warp_launch(rows);
  backward_data_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(a);
  TANDEM_CUDA_LAUNCH_CHECK("layer_norm backward_data_kernel", "x={} eps={}", x.shape().str(), eps);
  if (!dgamma.defined() && !dbeta.defined()) return;
  int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  chunks = chunks > 65535 ? 65535 : chunks;
  const int64_t chunk_rows = (rows + chunks - 1) / chunks;
  auto* partials = static_cast<float2*>(cc.workspace(sizeof(float2) * static_cast<size_t>(chunks * n)));
  const dim3 grid(static_cast<unsigned>((n + kTileColumns - 1) / kTileColumns), static_cast<unsigned>(chunks));
  column_partials_kernel<<<grid, dim3(kTileColumns, kTileRows), 0, cc.stream()>>>(a, chunk_rows, partials);
  TANDEM_CUDA_LAUNCH_CHECK("layer_norm column_partials_kernel", "x={} chunks={}", x.shape().str(), chunks);
  const Launch f = launch_for(n);
  column_finish_kernel<<<f.blocks, f.threads, 0, cc.stream()>>>(partials, chunks, n,
                                                                dgamma.defined() ? dgamma.data<float>() : nullptr,
                                                                dbeta.defined() ? dbeta.data<float>() : nullptr);
  TANDEM_CUDA_LAUNCH_CHECK("layer_norm column_finish_kernel", "x={}", x.shape().str());
}

}  // namespace tandem::backend::cuda
