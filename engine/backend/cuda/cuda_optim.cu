// Multi-tensor optimizer kernels, after PyTorch's _foreach / fused optimizers: the host packs up to
// TensorPack<Depth>::kMax tensors (their pointers, sizes and first block) into one kernel-argument
// struct (inside the 4 KiB parameter limit), and every block of the launch finds its tensor from
// blockIdx.x and walks that tensor's chunks. All parameters of a model go in one launch, or a few
// when there are more tensors than one struct holds. The per-element arithmetic is optim_math.h's,
// the same functions the CPU kernels run. The kernel-table entries are in cuda_optim.cpp.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "engine/backend/cuda/cuda_optim_launch.h"
#include "engine/backend/cuda/cuda_reduce.cuh"

namespace tandem::backend::cuda::detail {
namespace {

// Kernel parameters are limited to 4096 bytes; keep some room for the op's scalars.
constexpr int kParamBudget = 4096 - 96;

constexpr int max_tensors(int depth) { return (kParamBudget - 16) / (8 * depth + 8 + 8 + 4); }

// Depth arrays per tensor: sgd {w, dw, v}, adamw {w, dw, m, v}, squared norm {x}; and w's bf16
// shadow (null where there is none).
template <int Depth>
struct TensorPack {
  static constexpr int kMax = max_tensors(Depth);
  float* ptr[Depth][kMax];
  __nv_bfloat16* shadow[kMax];
  int64_t numel[kMax];
  int32_t block_start[kMax + 1];  // tensor t owns blocks [block_start[t], block_start[t + 1])
  int32_t count;
};

static_assert(sizeof(TensorPack<1>) <= kParamBudget);
static_assert(sizeof(TensorPack<3>) <= kParamBudget);
static_assert(sizeof(TensorPack<4>) <= kParamBudget);

// The tensor of this block: the last t with block_start[t] <= blockIdx.x (binary search).
template <int Depth>
__device__ int tensor_of_block(const TensorPack<Depth>& pack) {
  const int32_t b = static_cast<int32_t>(blockIdx.x);
  int lo = 0, hi = pack.count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (pack.block_start[mid] <= b) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Calls f(t, i) for every element i of this block's share of tensor t: chunk c of the tensor goes
// to its block c mod (blocks of t), and within a chunk thread x takes x, x + 256, x + 512, ...
// so each load instruction of a warp reads consecutive floats.
template <int Depth, typename F>
__device__ void for_each_element(const TensorPack<Depth>& pack, F&& f) {
  const int t = tensor_of_block(pack);
  const int64_t n = pack.numel[t];
  const int64_t first = pack.block_start[t];
  const int64_t blocks = pack.block_start[t + 1] - first;
  const int64_t local = static_cast<int64_t>(blockIdx.x) - first;
  for (int64_t base = local * kMultiTensorChunk; base < n; base += blocks * kMultiTensorChunk) {
#pragma unroll
    for (int u = 0; u < kMultiTensorUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * kMultiTensorThreads + threadIdx.x;
      if (i < n) f(t, i);
    }
  }
}

// __grid_constant__: the pack stays in the constant bank even though helpers take its address,
// instead of being copied to every thread's local memory.
__global__ void __launch_bounds__(kMultiTensorThreads)
    sgd_kernel(const __grid_constant__ TensorPack<3> pack, const SgdStep step) {
  for_each_element(pack, [&](int t, int64_t i) {
    float* w = pack.ptr[0][t];
    const float* g = pack.ptr[1][t];
    float* v = pack.ptr[2][t];
    // The buffer holds nothing before the first step: it is written, never read, then.
    float vi = step.use_momentum && !step.first_step ? v[i] : 0.0f;
    const float updated = sgd_step_element(step, w[i], g[i], vi);
    w[i] = updated;
    if (step.use_momentum) v[i] = vi;
    if (pack.shadow[t] != nullptr) pack.shadow[t][i] = __float2bfloat16_rn(updated);
  });
}

__global__ void __launch_bounds__(kMultiTensorThreads)
    adamw_kernel(const __grid_constant__ TensorPack<4> pack, const AdamWStep step) {
  for_each_element(pack, [&](int t, int64_t i) {
    float w = pack.ptr[0][t][i];
    float m = pack.ptr[2][t][i];
    float v = pack.ptr[3][t][i];
    adamw_step_element(step, w, pack.ptr[1][t][i], m, v);
    pack.ptr[0][t][i] = w;
    pack.ptr[2][t][i] = m;
    pack.ptr[3][t][i] = v;
    if (pack.shadow[t] != nullptr) pack.shadow[t][i] = __float2bfloat16_rn(w);
  });
}

// Pass 1 of the squared norm: partials[b] = sum of squares of block b's elements, in double.
__global__ void __launch_bounds__(kMultiTensorThreads)
    squared_norm_partials_kernel(const __grid_constant__ TensorPack<1> pack, double* partials) {
  double acc = 0.0;
  for_each_element(pack, [&](int t, int64_t i) {
    const double x = pack.ptr[0][t][i];
    acc += x * x;
  });
  __shared__ double scratch[tandem::cuda::kWarpSize];
  const double total = tandem::cuda::block_sum(acc, scratch);  // fixed shuffle tree: repeatable
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Pass 2 (one block): y = sum of the n partials, each thread striding in a fixed order.
__global__ void __launch_bounds__(kMultiTensorThreads)
    squared_norm_combine_kernel(const double* partials, int64_t n, float* y) {
  double acc = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += kMultiTensorThreads) acc += partials[j];
  __shared__ double scratch[tandem::cuda::kWarpSize];
  const double total = tandem::cuda::block_sum(acc, scratch);
  if (threadIdx.x == 0) *y = static_cast<float>(total);
}

// Every thread computes the same factor from the one device value, so the early return is uniform.
__global__ void __launch_bounds__(kMultiTensorThreads)
    clip_kernel(const __grid_constant__ TensorPack<1> pack, const float* squared_norm, double max_norm) {
  const float factor = clip_factor(*squared_norm, max_norm);
  if (factor == 1.0f) return;
  for_each_element(pack, [&](int t, int64_t i) {
    float* x = pack.ptr[0][t];
    x[i] = __fmul_rn(factor, x[i]);  // as the CPU's factor * x, never contracted
  });
}

// Packs the non-empty entries in order and calls launch(pack, blocks) whenever a pack is full and
// once for the rest; stops at the first launch error.
template <int Depth, typename Launch>
cudaError_t for_each_pack(const MultiTensorEntry* entries, size_t count, Launch&& launch) {
  TensorPack<Depth> pack;
  pack.count = 0;
  pack.block_start[0] = 0;
  for (size_t k = 0; k < count; ++k) {
    const int64_t blocks = multi_tensor_blocks(entries[k].numel);
    if (blocks == 0) continue;
    for (int d = 0; d < Depth; ++d) pack.ptr[d][pack.count] = entries[k].p[d];
    pack.shadow[pack.count] = static_cast<__nv_bfloat16*>(entries[k].shadow);
    pack.numel[pack.count] = entries[k].numel;
    pack.block_start[pack.count + 1] = pack.block_start[pack.count] + static_cast<int32_t>(blocks);
    ++pack.count;
    if (pack.count == TensorPack<Depth>::kMax) {
      if (cudaError_t err = launch(pack, pack.block_start[pack.count]); err != cudaSuccess) return err;
      pack.count = 0;
    }
  }
  if (pack.count > 0) return launch(pack, pack.block_start[pack.count]);
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_sgd(const SgdStep& step, const MultiTensorEntry* entries, size_t count, cudaStream_t stream) {
  return for_each_pack<3>(entries, count, [&](const TensorPack<3>& pack, int32_t blocks) {
    sgd_kernel<<<static_cast<unsigned>(blocks), kMultiTensorThreads, 0, stream>>>(pack, step);
    return cudaGetLastError();
  });
}

cudaError_t launch_adamw(const AdamWStep& step, const MultiTensorEntry* entries, size_t count, cudaStream_t stream) {
  return for_each_pack<4>(entries, count, [&](const TensorPack<4>& pack, int32_t blocks) {
    adamw_kernel<<<static_cast<unsigned>(blocks), kMultiTensorThreads, 0, stream>>>(pack, step);
    return cudaGetLastError();
  });
}

cudaError_t launch_squared_norm(const MultiTensorEntry* entries, size_t count, double* partials, float* y,
                                cudaStream_t stream) {
  int64_t written = 0;  // partials of earlier packs come first, in tensor order
  cudaError_t err = for_each_pack<1>(entries, count, [&](const TensorPack<1>& pack, int32_t blocks) {
    squared_norm_partials_kernel<<<static_cast<unsigned>(blocks), kMultiTensorThreads, 0, stream>>>(
        pack, partials + written);
    written += blocks;
    return cudaGetLastError();
  });
  if (err != cudaSuccess) return err;
  squared_norm_combine_kernel<<<1, kMultiTensorThreads, 0, stream>>>(partials, written, y);
  return cudaGetLastError();
}

cudaError_t launch_clip_by_global_norm(const MultiTensorEntry* entries, size_t count, const float* squared_norm,
                                       double max_norm, cudaStream_t stream) {
  return for_each_pack<1>(entries, count, [&](const TensorPack<1>& pack, int32_t blocks) {
    clip_kernel<<<static_cast<unsigned>(blocks), kMultiTensorThreads, 0, stream>>>(pack, squared_norm, max_norm);
    return cudaGetLastError();
  });
}

}  // namespace tandem::backend::cuda::detail
