// Data movement of N-D tensors on the GPU: permute and broadcast (one gather kernel through the
// coalesced index view of nd_index.h: writes are coalesced, reads follow the view) and windows
// along an axis (narrow, split, concat). Any dtype: elements move by size.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_reduce.cuh"
#include "engine/backend/nd_index.h"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::global_thread_index;
using tandem::cuda::grid_stride;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

template <typename T>
__global__ void gather_kernel(NdView view, const T* x, T* y, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) y[i] = x[view.offset(i)];
}

// For each outer index o, `block` contiguous elements from x's row o (x_row elements long) at
// x_start to y's row o at y_start.
template <typename T>
__global__ void window_kernel(const T* x, T* y, int64_t outer, int64_t x_row, int64_t y_row, int64_t x_start,
                              int64_t y_start, int64_t block) {
  const int64_t n = outer * block;
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const int64_t o = i / block, r = i - o * block;
    y[o * y_row + y_start + r] = x[o * x_row + x_start + r];
  }
}

template <typename T>
void launch_gather(CudaContext& cc, const NdView& view, const Tensor& x, Tensor& y, const char* op) {
  const int64_t n = y.numel();
  const Launch l = launch_for(n);
  gather_kernel<T><<<l.blocks, l.threads, 0, cc.stream()>>>(view, static_cast<const T*>(x.raw_data()),
                                                            static_cast<T*>(y.raw_data()), n);
  TANDEM_CUDA_LAUNCH_CHECK("gather_kernel", "op={} x={} y={}", op, x.describe(), y.describe());
}

void gather(CudaContext& cc, const NdView& view, const Tensor& x, Tensor& y, const char* op) {
  if (y.numel() == 0) return;
  switch (dtype_size(x.dtype())) {
    case 1: return launch_gather<uint8_t>(cc, view, x, y, op);
    case 2: return launch_gather<uint16_t>(cc, view, x, y, op);
    case 4: return launch_gather<uint32_t>(cc, view, x, y, op);
    default: return launch_gather<uint64_t>(cc, view, x, y, op);
  }
}

template <typename T>
void launch_window(CudaContext& cc, const Tensor& x, Tensor& y, int64_t outer, int64_t inner, int64_t x_start,
                   int64_t y_start, int64_t length, int axis) {
  // In elements: row o of x starts at o * x.dim(axis) * inner, its window at x_start * inner.
  const int64_t block = length * inner;
  const Launch l = launch_for(outer * block);
  window_kernel<T><<<l.blocks, l.threads, 0, cc.stream()>>>(
      static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), outer, x.dim(axis) * inner,
      y.dim(axis) * inner, x_start * inner, y_start * inner, block);
  TANDEM_CUDA_LAUNCH_CHECK("window_kernel", "op=copy_window x={} y={} axis={} x_start={} y_start={} length={}",
                           x.describe(), y.describe(), axis, x_start, y_start, length);
}

}  // namespace

void permute(Ctx& ctx, const Tensor& x, std::span<const int> perm, Tensor& y) {
  NdView view = permute_view(x.shape(), perm);
  NdView* views[] = {&view};
  coalesce(views);
  gather(tandem::cuda::cuda_context(ctx), view, x, y, "permute");
}

void expand(Ctx& ctx, const Tensor& x, Tensor& y) {
  NdView view = broadcast_view(x.shape(), y.shape());
  NdView* views[] = {&view};
  coalesce(views);
  gather(tandem::cuda::cuda_context(ctx), view, x, y, "expand");
}

void copy_window(Ctx& ctx, const Tensor& x, int axis, int64_t x_start, Tensor& y, int64_t y_start, int64_t length) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  if (outer * length * inner == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  switch (dtype_size(x.dtype())) {
    case 1: return launch_window<uint8_t>(cc, x, y, outer, inner, x_start, y_start, length, axis);
    case 2: return launch_window<uint16_t>(cc, x, y, outer, inner, x_start, y_start, length, axis);
    case 4: return launch_window<uint32_t>(cc, x, y, outer, inner, x_start, y_start, length, axis);
    default: return launch_window<uint64_t>(cc, x, y, outer, inner, x_start, y_start, length, axis);
  }
}

}  // namespace tandem::backend::cuda
