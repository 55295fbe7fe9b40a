// Index arithmetic of the N-D kernels (permute, expand, broadcasting elementwise) shared by the CPU
// loops and the CUDA kernels: a contiguous output is walked in order and each input is read through
// strides of its own, given per output dimension (0 along a broadcast dimension, reordered for a
// permute). Adjacent dimensions that every view walks alike are merged first (coalesce), so a
// bias added over (B, T, C) costs one division per row, not one per dimension per element.
#pragma once

#include <cstdint>
#include <span>

#include "engine/backend/host_device.h"
#include "engine/core/shape.h"

namespace tandem::backend {

inline constexpr int kMaxNdRank = Shape::kMaxRank;

struct NdView {
  int rank = 0;
  int64_t sizes[kMaxNdRank] = {};    // of the output
  int64_t strides[kMaxNdRank] = {};  // of the input, per output dimension, in elements

  // The input offset of the output's element i (row-major over sizes).
  TANDEM_HOST_DEVICE int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t size = sizes[d];
      off += (i % size) * strides[d];
      i /= size;
    }
    return off;
  }
  TANDEM_HOST_DEVICE int64_t inner_size() const { return rank > 0 ? sizes[rank - 1] : 1; }
  TANDEM_HOST_DEVICE int64_t inner_stride() const { return rank > 0 ? strides[rank - 1] : 0; }
};

// Reading `in` broadcast (NumPy rules, aligned right) to `out`: stride 0 where in has size 1 or
// lacks the dimension. The caller has checked that the shapes broadcast.
NdView broadcast_view(const Shape& in, const Shape& out);
// y = x.permute(perm): y's sizes, with x's strides in y's order. perm is a permutation of x's axes.
NdView permute_view(const Shape& x, std::span<const int> perm);
// Merges adjacent dimensions that every view walks contiguously (and drops size-1 ones), in place;
// all views share their sizes.
void coalesce(std::span<NdView*> views);

}  // namespace tandem::backend
