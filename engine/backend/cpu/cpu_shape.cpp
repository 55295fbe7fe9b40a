// Data movement of N-D tensors on the CPU: permute, broadcast (expand) and windows along an axis
// (narrow, split, concat and their gradients). Any dtype: elements move by size, not by value.
#include <cstring>
#include <vector>

#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/parallel.h"
#include "engine/backend/nd_index.h"

namespace tandem::backend::cpu {
namespace {

// y (contiguous) = x read through view, row by row: the coalesced inner dimension is copied with
// memcpy where it is contiguous in x, element by element otherwise.
template <typename T>
void gather_rows(const NdView& view, const T* x, T* y, int64_t n) {
  const int64_t inner = view.inner_size(), stride = view.inner_stride();
  const int64_t rows = inner > 0 ? n / inner : 0;
  parallel_for(rows, [&](int64_t r) {
    const T* src = x + view.offset(r * inner);
    T* dst = y + r * inner;
    if (stride == 1) {
      std::memcpy(dst, src, static_cast<size_t>(inner) * sizeof(T));
    } else {
      for (int64_t i = 0; i < inner; ++i) dst[i] = src[i * stride];
    }
  });
}

void gather(const NdView& view, const Tensor& x, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  switch (dtype_size(x.dtype())) {
    case 1: return gather_rows(view, static_cast<const uint8_t*>(x.raw_data()), static_cast<uint8_t*>(y.raw_data()), n);
    case 2: return gather_rows(view, static_cast<const uint16_t*>(x.raw_data()), static_cast<uint16_t*>(y.raw_data()), n);
    case 4: return gather_rows(view, static_cast<const uint32_t*>(x.raw_data()), static_cast<uint32_t*>(y.raw_data()), n);
    default: return gather_rows(view, static_cast<const uint64_t*>(x.raw_data()), static_cast<uint64_t*>(y.raw_data()), n);
  }
}

}  // namespace

void permute(Ctx& ctx, const Tensor& x, std::span<const int> perm, Tensor& y) {
  apply_thread_budget(ctx);
  NdView view = permute_view(x.shape(), perm);
  NdView* views[] = {&view};
  coalesce(views);
  gather(view, x, y);
}

void expand(Ctx& ctx, const Tensor& x, Tensor& y) {
  apply_thread_budget(ctx);
  NdView view = broadcast_view(x.shape(), y.shape());
  NdView* views[] = {&view};
  coalesce(views);
  gather(view, x, y);
}

void copy_window(Ctx& ctx, const Tensor& x, int axis, int64_t x_start, Tensor& y, int64_t y_start, int64_t length) {
  apply_thread_budget(ctx);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
  const size_t element = dtype_size(x.dtype());
  const size_t block = static_cast<size_t>(length * inner) * element;
  if (block == 0 || outer == 0) return;
  const auto* src = static_cast<const char*>(x.raw_data());
  auto* dst = static_cast<char*>(y.raw_data());
  const int64_t x_axis = x.dim(axis), y_axis = y.dim(axis);
  parallel_for(outer, [&](int64_t o) {
    std::memcpy(dst + static_cast<size_t>((o * y_axis + y_start) * inner) * element,
                src + static_cast<size_t>((o * x_axis + x_start) * inner) * element, block);
  });
}

}  // namespace tandem::backend::cpu
