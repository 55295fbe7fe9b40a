// Selection kernels on the GPU: comparisons into u8 masks, where, dtype casts and gather, each
// element read through its operand's view (cuda_pointwise.cu's scheme). The results equal the CPU
// backend's bit for bit: comparisons and selections compute nothing, the cast's f32 -> i64 rule is
// written out (toward zero; INT64_MIN where C++ leaves it undefined), and gather's backward sums
// in the order of gather_index.h on both. An index out of range cannot be reported from the
// device: gather writes NaN there (the NaN-loss check then stops a run) and it passes no gradient.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_reduce.cuh"
#include "engine/backend/gather_index.h"
#include "engine/backend/topk_order.h"
#include "engine/backend/nd_index.h"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::global_thread_index;
using tandem::cuda::grid_stride;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

template <typename T>
__device__ __forceinline__ bool holds(CompareOp op, T a, T b) {
  switch (op) {
    case CompareOp::kEq: return a == b;
    case CompareOp::kNe: return a != b;
    case CompareOp::kLt: return a < b;
    case CompareOp::kLe: return a <= b;
    case CompareOp::kGt: return a > b;
    default: return a >= b;  // kGe
  }
}

template <typename T>
__global__ void compare_kernel(CompareOp op, NdView va, NdView vb, const T* a, const T* b, uint8_t* y, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    y[i] = holds(op, a[va.offset(i)], b[vb.offset(i)]) ? 1 : 0;
  }
}

__global__ void where_kernel(NdView vc, NdView va, NdView vb, const uint8_t* cond, const float* a, const float* b,
                             float* y, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    y[i] = cond[vc.offset(i)] != 0 ? a[va.offset(i)] : b[vb.offset(i)];
  }
}

__device__ __forceinline__ int64_t truncate_to_i64(float v) {
  constexpr float kLimit = 9.2233720368547758e18f;  // 2^63
  return isfinite(v) && v > -kLimit && v < kLimit ? static_cast<int64_t>(v) : INT64_MIN;
}

template <typename From, typename To>
__global__ void cast_kernel(const From* x, To* y, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    if constexpr (std::is_same_v<From, float> && std::is_same_v<To, int64_t>) {
      y[i] = truncate_to_i64(x[i]);
    } else {
      y[i] = static_cast<To>(x[i]);
    }
  }
}

__global__ void gather_kernel(GatherView view, const float* x, const int64_t* index, float* y, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const int64_t at = view.x_offset(i, index[i]);
    y[i] = at >= 0 ? x[at] : NAN;
  }
}

__global__ void gather_backward_kernel(GatherView view, const float* dy, const int64_t* index, float* dx, int64_t n) {
  for (int64_t e = global_thread_index(); e < n; e += grid_stride()) dx[e] = view.backward_sum(e, index, dy);
}

constexpr int kTopkThreads = 256;

// One block per row (rows strided over the grid): k rounds, each a block-wide search for the first
// element in topk_before's order among those not taken yet, which thread 0 then marks taken.
__global__ void __launch_bounds__(kTopkThreads) topk_kernel(const float* x, int64_t rows, int64_t n, int64_t k,
                                                             bool largest, uint8_t* taken, int64_t* out) {
  __shared__ float best_value[kTopkThreads];
  __shared__ int64_t best_index[kTopkThreads];
  const int t = threadIdx.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = x + r * n;
    uint8_t* row_taken = taken + r * n;
    for (int64_t c = t; c < n; c += kTopkThreads) row_taken[c] = 0;
    __syncthreads();
    for (int64_t j = 0; j < k; ++j) {
      float value = 0.0f;
      int64_t index = -1;
      for (int64_t c = t; c < n; c += kTopkThreads) {
        if (row_taken[c] == 0 && (index < 0 || topk_before(row[c], c, value, index, largest))) {
          value = row[c];
          index = c;
        }
      }
      best_value[t] = value;
      best_index[t] = index;
      __syncthreads();
      for (int stride = kTopkThreads / 2; stride > 0; stride /= 2) {
        if (t < stride) {
          const int o = t + stride;
          if (best_index[o] >= 0 &&
              (best_index[t] < 0 || topk_before(best_value[o], best_index[o], best_value[t], best_index[t], largest))) {
            best_value[t] = best_value[o];
            best_index[t] = best_index[o];
          }
        }
        __syncthreads();
      }
      if (t == 0) {
        out[r * k + j] = best_index[0];
        row_taken[best_index[0]] = 1;
      }
      __syncthreads();
    }
  }
}

template <typename From, typename To>
void launch_cast(const Tensor& x, Tensor& y, cudaStream_t stream) {
  const Launch l = launch_for(x.numel());
  cast_kernel<From, To><<<l.blocks, l.threads, 0, stream>>>(x.data<From>(), y.data<To>(), x.numel());
  TANDEM_CUDA_LAUNCH_CHECK("cast_kernel", "x={} to {}", x.describe(), dtype_name(y.dtype()));
}

template <typename From>
void cast_from(const Tensor& x, Tensor& y, cudaStream_t stream) {
  if (y.dtype() == DType::kF32) return launch_cast<From, float>(x, y, stream);
  launch_cast<From, int64_t>(x, y, stream);
}

}  // namespace

void compare(Ctx& ctx, CompareOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  NdView va = broadcast_view(a.shape(), y.shape()), vb = broadcast_view(b.shape(), y.shape());
  NdView* views[] = {&va, &vb};
  coalesce(views);
  const Launch l = launch_for(n);
  if (a.dtype() == DType::kI64) {
    compare_kernel<int64_t><<<l.blocks, l.threads, 0, cc.stream()>>>(op, va, vb, a.data<int64_t>(), b.data<int64_t>(),
                                                                      y.data<uint8_t>(), n);
  } else {
    compare_kernel<float><<<l.blocks, l.threads, 0, cc.stream()>>>(op, va, vb, a.data<float>(), b.data<float>(),
                                                                    y.data<uint8_t>(), n);
  }
  TANDEM_CUDA_LAUNCH_CHECK("compare_kernel", "op={} a={} b={}", static_cast<int>(op), a.describe(), b.describe());
}

void where(Ctx& ctx, const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  NdView vc = broadcast_view(cond.shape(), y.shape()), va = broadcast_view(a.shape(), y.shape()),
         vb = broadcast_view(b.shape(), y.shape());
  NdView* views[] = {&vc, &va, &vb};
  coalesce(views);
  const Launch l = launch_for(n);
  where_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(vc, va, vb, cond.data<uint8_t>(), a.data<float>(),
                                                        b.data<float>(), y.data<float>(), n);
  TANDEM_CUDA_LAUNCH_CHECK("where_kernel", "cond={} a={} b={}", cond.shape().str(), a.shape().str(), b.shape().str());
}

void cast(Ctx& ctx, const Tensor& x, Tensor& y) {
  if (x.numel() == 0) return;
  cudaStream_t stream = tandem::cuda::cuda_context(ctx).stream();
  switch (x.dtype()) {
    case DType::kF32: return cast_from<float>(x, y, stream);
    case DType::kI64: return cast_from<int64_t>(x, y, stream);
    default: return cast_from<uint8_t>(x, y, stream);  // u8 (ops_select.cpp admits no other)
  }
}

void gather(Ctx& ctx, const Tensor& x, int dim, const Tensor& index, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Launch l = launch_for(n);
  gather_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(gather_view(x.shape(), dim, index.shape()), x.data<float>(),
                                                         index.data<int64_t>(), y.data<float>(), n);
  TANDEM_CUDA_LAUNCH_CHECK("gather_kernel", "x={} dim={} index={}", x.shape().str(), dim, index.shape().str());
}

void gather_backward(Ctx& ctx, const Tensor& dy, int dim, const Tensor& index, Tensor& dx) {
  const int64_t n = dx.numel();
  if (n == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Launch l = launch_for(n);
  gather_backward_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(gather_view(dx.shape(), dim, index.shape()),
                                                                  dy.data<float>(), index.data<int64_t>(),
                                                                  dx.data<float>(), n);
  TANDEM_CUDA_LAUNCH_CHECK("gather_backward_kernel", "dx={} dim={} index={}", dx.shape().str(), dim,
                           index.shape().str());
}

void topk_indices(Ctx& ctx, const Tensor& x, int64_t k, bool largest, Tensor& indices) {
  const int64_t rows = x.dim(0), n = x.dim(1);
  if (rows == 0 || k == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  // The taken marks, n bytes a row (scratch on the context's device, as embedding_backward's).
  Tensor taken = Tensor::empty({rows, n}, DType::kU8, ctx.device());
  const unsigned blocks = static_cast<unsigned>(rows < 4096 ? rows : 4096);
  topk_kernel<<<blocks, kTopkThreads, 0, cc.stream()>>>(x.data<float>(), rows, n, k, largest, taken.data<uint8_t>(),
                                                        indices.data<int64_t>());
  TANDEM_CUDA_LAUNCH_CHECK("topk_kernel", "x={} k={} largest={}", x.shape().str(), k, largest);
}

}  // namespace tandem::backend::cuda
