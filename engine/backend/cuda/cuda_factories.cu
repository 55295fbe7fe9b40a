// The factories' kernels on CUDA (contracts in kernels.h): grid-stride loops over the flat storage
// with factory_math.h's per-element values, the ones the CPU kernels compute.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_reduce.cuh"
#include "engine/backend/factory_math.h"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::global_thread_index;
using tandem::cuda::grid_stride;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

__global__ void arange_i64_kernel(int64_t n, int64_t start, int64_t step, int64_t* y) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) y[i] = start + i * step;
}

__global__ void arange_f32_kernel(int64_t n, double start, double step, float* y) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    y[i] = static_cast<float>(arange_element(start, step, i));
  }
}

__global__ void arange_bf16_kernel(int64_t n, double start, double step, __nv_bfloat16* y) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    y[i] = __float2bfloat16_rn(static_cast<float>(arange_element(start, step, i)));
  }
}

__global__ void random_kernel(int64_t n, uint64_t seed, bool normal, float a, float b, float* y) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) y[i] = random_element(seed, normal, a, b, i);
}

}  // namespace

void arange_fill(Ctx& ctx, double start, double step, Tensor& y) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t n = y.numel();
  const Launch l = launch_for(n);
  switch (y.dtype()) {
    case DType::kI64:
      arange_i64_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(n, static_cast<int64_t>(start),
                                                                  static_cast<int64_t>(step), y.data<int64_t>());
      break;
    case DType::kBF16:
      arange_bf16_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(n, start, step,
                                                                   static_cast<__nv_bfloat16*>(y.raw_data()));
      break;
    default:
      arange_f32_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(n, start, step, y.data<float>());
  }
  TANDEM_CUDA_LAUNCH_CHECK("arange_fill", "op=arange_fill y={} start={} step={} n={}", y.describe(), start, step, n);
}

void random_fill(Ctx& ctx, const RandomFillParams& p, Tensor& y) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t n = y.numel();
  const Launch l = launch_for(n);
  random_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(n, p.seed, p.normal, p.a, p.b, y.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("random_fill", "op=random_fill y={} normal={} a={} b={} n={}", y.describe(), p.normal,
                           p.a, p.b, n);
}

}  // namespace tandem::backend::cuda
