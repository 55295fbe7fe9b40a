// torch.gather's index arithmetic, shared by the CPU loops and the CUDA kernels so that both give
// the same bits: the forward walks the index (and y) in order and reads x at the index's value
// along dim; the backward gives each x element the sum, in index order, of the dy elements whose
// index names it, so no element is written twice and nothing needs atomics.
#pragma once

#include <cstdint>

#include "engine/backend/host_device.h"
#include "engine/core/shape.h"

namespace tandem::backend {

struct GatherView {
  int rank = 0, dim = 0;
  int64_t x_sizes[Shape::kMaxRank] = {}, x_strides[Shape::kMaxRank] = {};
  int64_t index_sizes[Shape::kMaxRank] = {}, index_strides[Shape::kMaxRank] = {};

  // x's offset for y's element i, whose index value is v; -1 where v is outside [0, x's size at dim).
  TANDEM_HOST_DEVICE int64_t x_offset(int64_t i, int64_t v) const {
    if (v < 0 || v >= x_sizes[dim]) return -1;
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t c = i % index_sizes[d];
      i /= index_sizes[d];
      off += (d == dim ? v : c) * x_strides[d];
    }
    return off;
  }

  // dx's element e: the sum, in index order along dim, of dy where the index names e.
  TANDEM_HOST_DEVICE float backward_sum(int64_t e, const int64_t* index, const float* dy) const {
    int64_t base = 0, target = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t c = e % x_sizes[d];
      e /= x_sizes[d];
      if (d == dim) {
        target = c;
      } else {
        if (c >= index_sizes[d]) return 0.0f;  // beyond the index: gathered by nobody
        base += c * index_strides[d];
      }
    }
    float acc = 0.0f;
    for (int64_t j = 0; j < index_sizes[dim]; ++j) {
      const int64_t p = base + j * index_strides[dim];
      if (index[p] == target) acc += dy[p];
    }
    return acc;
  }
};

// x and index contiguous, of one rank; the caller has checked the shapes.
inline GatherView gather_view(const Shape& x, int dim, const Shape& index) {
  GatherView v;
  v.rank = x.rank();
  v.dim = dim;
  int64_t xs = 1, is = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.x_sizes[d] = x[d];
    v.x_strides[d] = xs;
    xs *= x[d];
    v.index_sizes[d] = index[d];
    v.index_strides[d] = is;
    is *= index[d];
  }
  return v;
}

}  // namespace tandem::backend
