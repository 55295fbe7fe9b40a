// Selection kernels on the CPU: comparisons into u8 masks, where, dtype casts and gather; each
// element read through its operand's view, on the context's threads when large.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/parallel.h"
#include "engine/backend/gather_index.h"
#include "engine/backend/topk_order.h"
#include "engine/backend/nd_index.h"

namespace tandem::backend::cpu {
namespace {

template <typename F>
void each(int64_t n, F f) {
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) f(i);
}

template <typename T>
bool holds(CompareOp op, T a, T b) {
  switch (op) {
    case CompareOp::kEq: return a == b;
    case CompareOp::kNe: return a != b;
    case CompareOp::kLt: return a < b;
    case CompareOp::kLe: return a <= b;
    case CompareOp::kGt: return a > b;
    case CompareOp::kGe: return a >= b;
  }
  return false;
}

template <typename T>
void compare_typed(CompareOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  NdView va = broadcast_view(a.shape(), y.shape()), vb = broadcast_view(b.shape(), y.shape());
  NdView* views[] = {&va, &vb};
  coalesce(views);
  const T *pa = a.data<T>(), *pb = b.data<T>();
  uint8_t* py = y.data<uint8_t>();
  each(y.numel(), [&](int64_t i) { py[i] = holds(op, pa[va.offset(i)], pb[vb.offset(i)]) ? 1 : 0; });
}

// f32 to i64 as the CUDA backend's __float2ll_rz: toward zero, INT64_MIN where C++ leaves it undefined.
int64_t truncate_to_i64(float v) {
  constexpr float kLimit = 9.2233720368547758e18f;  // 2^63
  return std::isfinite(v) && v > -kLimit && v < kLimit ? static_cast<int64_t>(v) : std::numeric_limits<int64_t>::min();
}

template <typename From, typename To>
void cast_typed(const Tensor& x, Tensor& y) {
  const From* px = x.data<From>();
  To* py = y.data<To>();
  each(x.numel(), [&](int64_t i) {
    if constexpr (std::is_same_v<From, float> && std::is_same_v<To, int64_t>) {
      py[i] = truncate_to_i64(px[i]);
    } else {
      py[i] = static_cast<To>(px[i]);
    }
  });
}

template <typename From>
void cast_from(const Tensor& x, Tensor& y) {
  if (y.dtype() == DType::kF32) return cast_typed<From, float>(x, y);
  return cast_typed<From, int64_t>(x, y);
}

}  // namespace

void compare(Ctx& ctx, CompareOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  apply_thread_budget(ctx);
  if (y.numel() == 0) return;
  if (a.dtype() == DType::kI64) return compare_typed<int64_t>(op, a, b, y);
  compare_typed<float>(op, a, b, y);
}

void where(Ctx& ctx, const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& y) {
  apply_thread_budget(ctx);
  if (y.numel() == 0) return;
  NdView vc = broadcast_view(cond.shape(), y.shape()), va = broadcast_view(a.shape(), y.shape()),
         vb = broadcast_view(b.shape(), y.shape());
  NdView* views[] = {&vc, &va, &vb};
  coalesce(views);
  const uint8_t* pc = cond.data<uint8_t>();
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float* py = y.data<float>();
  each(y.numel(), [&](int64_t i) { py[i] = pc[vc.offset(i)] != 0 ? pa[va.offset(i)] : pb[vb.offset(i)]; });
}

void cast(Ctx& ctx, const Tensor& x, Tensor& y) {
  apply_thread_budget(ctx);
  if (x.numel() == 0) return;
  switch (x.dtype()) {
    case DType::kF32: return cast_from<float>(x, y);
    case DType::kI64: return cast_from<int64_t>(x, y);
    default: return cast_from<uint8_t>(x, y);  // u8 (ops_select.cpp admits no other)
  }
}

void gather(Ctx& ctx, const Tensor& x, int dim, const Tensor& index, Tensor& y) {
  apply_thread_budget(ctx);
  const GatherView view = gather_view(x.shape(), dim, index.shape());
  const int64_t* id = index.data<int64_t>();
  for (int64_t i = 0; i < index.numel(); ++i) {  // data: checked before any element is read
    TANDEM_CHECK(id[i] >= 0 && id[i] < x.dim(dim), ErrorCode::kInvalidArgument,
                 "gather: index {} at position {} is out of range for dimension {} of x {} (size {})", id[i], i, dim,
                 x.shape().str(), x.dim(dim));
  }
  const float* px = x.data<float>();
  float* py = y.data<float>();
  each(y.numel(), [&](int64_t i) { py[i] = px[view.x_offset(i, id[i])]; });
}

void gather_backward(Ctx& ctx, const Tensor& dy, int dim, const Tensor& index, Tensor& dx) {
  apply_thread_budget(ctx);
  const GatherView view = gather_view(dx.shape(), dim, index.shape());
  const int64_t* id = index.data<int64_t>();
  const float* g = dy.data<float>();
  float* out = dx.data<float>();
  each(dx.numel(), [&](int64_t e) { out[e] = view.backward_sum(e, id, g); });
}

void topk_indices(Ctx& ctx, const Tensor& x, int64_t k, bool largest, Tensor& indices) {
  apply_thread_budget(ctx);
  const int64_t rows = x.dim(0), n = x.dim(1);
  const float* px = x.data<float>();
  int64_t* out = indices.data<int64_t>();
#pragma omp parallel for schedule(static) if (rows * n >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = px + r * n;
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t c = 0; c < n; ++c) order[static_cast<size_t>(c)] = c;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return topk_before(row[a], a, row[b], b, largest); });
    std::copy(order.begin(), order.begin() + k, out + r * k);
  }
}

}  // namespace tandem::backend::cpu
