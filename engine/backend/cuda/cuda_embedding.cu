// Embedding on the GPU: a gather of weight rows by id, and a deterministic backward without
// floating-point atomics: the ids are sorted with their positions (CUB's stable radix sort, so
// equal ids keep position order), then one thread per (first position of an id, column) adds that
// id's rows in order. An id outside [0, V) cannot be reported from the device: its output row is
// NaN (the run's NaN-loss check then stops it) and it adds no gradient.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cmath>
#include <cstdint>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_reduce.cuh"
#include "engine/core/error.h"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::global_thread_index;
using tandem::cuda::grid_stride;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

__global__ void gather_rows_kernel(const float* w, const int64_t* ids, float* y, int64_t n, int64_t rows, int64_t d) {
  const int64_t total = n * d;
  for (int64_t e = global_thread_index(); e < total; e += grid_stride()) {
    const int64_t i = e / d, c = e - i * d;
    const int64_t id = ids[i];
    y[e] = id >= 0 && id < rows ? w[id * d + c] : NAN;
  }
}

// Sort keys: the id as int32, or `rows` (past every real id) for an id out of range; values the positions.
__global__ void sort_inputs_kernel(const int64_t* ids, int64_t n, int64_t rows, int32_t* keys, int32_t* positions) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const int64_t id = ids[i];
    keys[i] = static_cast<int32_t>(id >= 0 && id < rows ? id : rows);
    positions[i] = static_cast<int32_t>(i);
  }
}

__global__ void segment_sums_kernel(const int32_t* keys, const int32_t* positions, const float* dy, float* dw,
                                    int64_t n, int64_t rows, int64_t d) {
  const int64_t total = n * d;
  for (int64_t e = global_thread_index(); e < total; e += grid_stride()) {
    const int64_t k = e / d, c = e - k * d;
    const int32_t key = keys[k];
    if (key >= rows || (k > 0 && keys[k - 1] == key)) continue;  // not the first of its id
    float acc = 0.0f;
    for (int64_t r = k; r < n && keys[r] == key; ++r) acc += dy[static_cast<int64_t>(positions[r]) * d + c];
    dw[static_cast<int64_t>(key) * d + c] = acc;
  }
}

int end_bit_for(int64_t rows) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) <= rows) ++bits;
  return bits;
}

}  // namespace

void embedding_forward(Ctx& ctx, const Tensor& weight, const Tensor& ids, Tensor& y) {
  const int64_t n = ids.numel(), rows = weight.dim(0), d = weight.dim(1);
  if (n * d == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Launch l = launch_for(n * d);
  gather_rows_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(weight.data<float>(), ids.data<int64_t>(),
                                                              y.data<float>(), n, rows, d);
  TANDEM_CUDA_LAUNCH_CHECK("gather_rows_kernel", "op=embedding_forward weight={} ids={}", weight.shape().str(),
                           ids.shape().str());
}

void embedding_backward(Ctx& ctx, const Tensor& ids, const Tensor& dy, Tensor& dweight) {
  const int64_t n = ids.numel(), rows = dweight.dim(0), d = dweight.dim(1);
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  TANDEM_CUDA_CHECK(cudaMemsetAsync(dweight.raw_data(), 0, dweight.nbytes(), cc.stream()),
                    "op=embedding_backward dweight={}", dweight.shape().str());
  if (n * d == 0) return;
  TANDEM_CHECK(n < INT32_MAX && rows < INT32_MAX, ErrorCode::kInvalidArgument,
               "embedding_backward: {} ids into {} rows exceed the sort's 32-bit range", n, rows);
  Tensor buffers = Tensor::empty({4 * n}, DType::kI32, ctx.device());
  int32_t* keys_in = buffers.data<int32_t>();
  int32_t* keys_out = keys_in + n;
  int32_t* pos_in = keys_out + n;
  int32_t* pos_out = pos_in + n;
  const Launch l = launch_for(n);
  sort_inputs_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(ids.data<int64_t>(), n, rows, keys_in, pos_in);
  TANDEM_CUDA_LAUNCH_CHECK("sort_inputs_kernel", "op=embedding_backward ids={}", ids.shape().str());
  const int end_bit = end_bit_for(rows);
  size_t temp_bytes = 0;
  TANDEM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                    static_cast<int>(n), 0, end_bit, cc.stream()),
                    "op=embedding_backward (sort size) n={}", n);
  Tensor temp = Tensor::empty({static_cast<int64_t>(temp_bytes > 0 ? temp_bytes : 1)}, DType::kU8, ctx.device());
  TANDEM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                    static_cast<int>(n), 0, end_bit, cc.stream()),
                    "op=embedding_backward (sort) n={} end_bit={}", n, end_bit);
  const Launch s = launch_for(n * d);
  segment_sums_kernel<<<s.blocks, s.threads, 0, cc.stream()>>>(keys_out, pos_out, dy.data<float>(),
                                                               dweight.data<float>(), n, rows, d);
  TANDEM_CUDA_LAUNCH_CHECK("segment_sums_kernel", "op=embedding_backward ids={} dy={}", ids.shape().str(),
                           dy.shape().str());
}

}  // namespace tandem::backend::cuda
