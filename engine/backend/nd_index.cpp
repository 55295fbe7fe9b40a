#include "engine/backend/nd_index.h"

namespace tandem::backend {

NdView broadcast_view(const Shape& in, const Shape& out) {
  NdView v;
  v.rank = out.rank();
  int64_t stride = 1;
  for (int d = out.rank() - 1; d >= 0; --d) {
    v.sizes[d] = out[d];
    const int in_dim = d - (out.rank() - in.rank());
    if (in_dim < 0 || in[in_dim] == 1) {
      v.strides[d] = 0;
    } else {
      v.strides[d] = stride;
    }
    if (in_dim >= 0) stride *= in[in_dim];
  }
  return v;
}

NdView permute_view(const Shape& x, std::span<const int> perm) {
  int64_t x_strides[kMaxNdRank] = {};
  int64_t stride = 1;
  for (int d = x.rank() - 1; d >= 0; --d) {
    x_strides[d] = stride;
    stride *= x[d];
  }
  NdView v;
  v.rank = x.rank();
  for (int d = 0; d < x.rank(); ++d) {
    v.sizes[d] = x[perm[static_cast<size_t>(d)]];
    v.strides[d] = x_strides[perm[static_cast<size_t>(d)]];
  }
  return v;
}

void coalesce(std::span<NdView*> views) {
  if (views.empty()) return;
  NdView& first = *views[0];
  int out = 0;
  for (int d = 0; d < first.rank; ++d) {
    if (first.sizes[d] == 1 && first.rank > 1) continue;  // walks nothing
    bool merge = out > 0;
    for (NdView* v : views) {
      // Dimension d continues the previous kept one when stepping the previous by one is the same
      // as stepping d across its whole size.
      merge = merge && v->strides[out - 1] == v->strides[d] * v->sizes[d];
    }
    for (NdView* v : views) {
      if (merge) {
        v->sizes[out - 1] *= v->sizes[d];
        v->strides[out - 1] = v->strides[d];
      } else {
        v->sizes[out] = v->sizes[d];
        v->strides[out] = v->strides[d];
      }
    }
    if (!merge) ++out;
  }
  if (out == 0) {  // every dimension had size 1: one element
    for (NdView* v : views) {
      v->sizes[0] = 1;
      v->strides[0] = 0;
    }
    out = 1;
  }
  for (NdView* v : views) v->rank = out;
}

}  // namespace tandem::backend
