#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_reduce.cuh"
#include "engine/backend/cuda/cuda_xent_inplace.h"
#include "engine/backend/loss_math.h"

namespace tandem::backend::cuda {
namespace {

namespace lm = tandem::backend::loss_math;
using tandem::cuda::kFullWarp;
using tandem::cuda::kWarpSize;

// The forward and backward in one pass over a row, in place: a fused classifier's chunk has few rows
// (hundreds) of many classes (a vocabulary), so a block per row keeps the SMs busy where a warp per
// row would not. Each thread folds columns j = tid, tid + 256, ...; the warps' pairs merge by
// butterfly, then every thread merges the warps' pairs in warp order, so all threads hold the same
// lse bits. Thread 0 reads the label's logit before the barrier that precedes any write.
constexpr int kInplaceThreads = 256;
constexpr int kInplaceWarps = kInplaceThreads / kWarpSize;

struct RowSums {
  lm::LogSumExp lse;
  double sum_z;
};

__device__ RowSums block_row_sums(RowSums r, RowSums* scratch) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    lm::LogSumExp other{__shfl_xor_sync(kFullWarp, r.lse.max, offset), __shfl_xor_sync(kFullWarp, r.lse.sum, offset)};
    r.lse = lm::lse_combine(r.lse, other);
    r.sum_z += __shfl_xor_sync(kFullWarp, r.sum_z, offset);
  }
  if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = r;
  __syncthreads();
  RowSums all = scratch[0];
  for (int w = 1; w < kInplaceWarps; ++w) {
    all.lse = lm::lse_combine(all.lse, scratch[w].lse);
    all.sum_z += scratch[w].sum_z;
  }
  return all;
}

__global__ void __launch_bounds__(kInplaceThreads)
    softmax_xent_inplace_kernel(XentInplaceArgs a, lm::SmoothedTarget target) {
  __shared__ RowSums scratch[kInplaceWarps];
  const int64_t k = a.classes;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    float* z = a.logits + row * k;
    const int64_t label = a.labels[row];  // the same for every thread: the branches below are block-uniform
    if (label == a.ignore_index) {
      for (int64_t j = threadIdx.x; j < k; j += kInplaceThreads) z[j] = 0.0f;
      if (threadIdx.x == 0) a.loss[row] = 0.0f;
      continue;
    }
    const bool in_range = lm::label_in_range(label, k);
    const float z_label = threadIdx.x == 0 && in_range ? z[label] : 0.0f;
    RowSums r{lm::lse_empty(), 0.0};
    for (int64_t j = threadIdx.x; j < k; j += kInplaceThreads) {
      const float v = z[j];
      r.lse = lm::lse_add(r.lse, v);
      r.sum_z += v;
    }
    const RowSums all = block_row_sums(r, scratch);
    const double lse = lm::lse_value(all.lse);
    for (int64_t j = threadIdx.x; j < k; j += kInplaceThreads) {
      z[j] = in_range ? lm::cross_entropy_grad(a.scale, lm::softmax_prob(z[j], lse), lm::target_value(target, j, label))
                      : NAN;
    }
    if (threadIdx.x == 0) {
      a.loss[row] = in_range ? lm::cross_entropy_loss(lse, z_label, all.sum_z, a.smoothing, k) : NAN;
    }
    __syncthreads();  // scratch is read by every thread before the next row writes it
  }
}

}  // namespace

void launch_softmax_xent_inplace(const XentInplaceArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  constexpr int64_t kMaxBlocks = 65535;  // rows beyond it are taken by the grid-stride loop
  const auto blocks = static_cast<unsigned>(a.rows < kMaxBlocks ? a.rows : kMaxBlocks);
  softmax_xent_inplace_kernel<<<blocks, kInplaceThreads, 0, stream>>>(a, lm::smoothed_target(a.smoothing, a.classes));
  TANDEM_CUDA_LAUNCH_CHECK("softmax_xent_inplace_kernel", "rows={} classes={} smoothing={} scale={}", a.rows, a.classes,
                           a.smoothing, a.scale);
}

}  // namespace tandem::backend::cuda
