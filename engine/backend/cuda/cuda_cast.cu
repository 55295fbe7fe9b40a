// The conversion kernels of cuda_cast.h: f32 <-> bf16 (round to nearest even) and filter layout
// changes (KCRS <-> KRSC, with or without a change of element type), grid-stride with 64-bit indices.
#include "engine/backend/cuda/cuda_cast.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/core/error.h"

namespace tandem::backend::cuda {
namespace {

constexpr int64_t kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;  // the grid-stride loop covers the rest

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

__device__ __forceinline__ float load_float(float v) { return v; }
__device__ __forceinline__ float load_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T store_float(float v);
template <>
__device__ __forceinline__ float store_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 store_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename From, typename To>
__global__ void cast_kernel(const From* __restrict__ src, To* __restrict__ dst, int64_t n) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    dst[i] = store_float<To>(load_float(src[i]));
  }
}

__global__ void divide_kernel(__nv_bfloat16* __restrict__ data, int64_t n, float divisor) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    data[i] = __float2bfloat16_rn(__fdiv_rn(__bfloat162float(data[i]), divisor));
  }
}

// Linear offset of filter element (k, c, r, s) in a layout.
__device__ __forceinline__ int64_t filter_offset(bool krsc, int64_t k, int64_t c, int64_t r, int64_t s,
                                                 int64_t C, int64_t R, int64_t S) {
  return krsc ? ((k * R + r) * S + s) * C + c : ((k * C + c) * R + r) * S + s;
}

// One thread per destination element: decode (k, c, r, s) from the destination layout, read the source.
template <typename From, typename To>
__global__ void filter_kernel(const From* __restrict__ src, bool src_krsc, To* __restrict__ dst, bool dst_krsc,
                              int64_t K, int64_t C, int64_t R, int64_t S) {
  const int64_t n = K * C * R * S;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t k, c, r, s, rest = i;
    if (dst_krsc) {
      c = rest % C;
      rest /= C;
      s = rest % S;
      rest /= S;
      r = rest % R;
      k = rest / R;
    } else {
      s = rest % S;
      rest /= S;
      r = rest % R;
      rest /= R;
      c = rest % C;
      k = rest / C;
    }
    dst[i] = store_float<To>(load_float(src[filter_offset(src_krsc, k, c, r, s, C, R, S)]));
  }
}

template <typename From, typename To>
void launch_filter(const void* src, bool src_krsc, void* dst, bool dst_krsc, const FilterShape& f,
                   cudaStream_t stream) {
  filter_kernel<From, To><<<blocks_for(f.numel()), kThreads, 0, stream>>>(
      static_cast<const From*>(src), src_krsc, static_cast<To*>(dst), dst_krsc, f.k, f.c, f.r, f.s);
  TANDEM_CUDA_LAUNCH_CHECK("filter_kernel", "filter (K={}, C={}, R={}, S={}) {} -> {}", f.k, f.c, f.r, f.s,
                           src_krsc ? "KRSC" : "KCRS", dst_krsc ? "KRSC" : "KCRS");
}

bool is_f32(DType t) { return t == DType::kF32; }

}  // namespace

void cast_f32_to_bf16(const float* src, void* dst_bf16, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  cast_kernel<float, __nv_bfloat16><<<blocks_for(n), kThreads, 0, stream>>>(
      src, static_cast<__nv_bfloat16*>(dst_bf16), n);
  TANDEM_CUDA_LAUNCH_CHECK("cast_kernel<f32, bf16>", "n={}", n);
}

void cast_bf16_to_f32(const void* src_bf16, float* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  cast_kernel<__nv_bfloat16, float><<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(src_bf16), dst, n);
  TANDEM_CUDA_LAUNCH_CHECK("cast_kernel<bf16, f32>", "n={}", n);
}

void divide_bf16(void* data_bf16, int64_t n, float divisor, cudaStream_t stream) {
  if (n <= 0) return;
  divide_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data_bf16), n, divisor);
  TANDEM_CUDA_LAUNCH_CHECK("divide_kernel<bf16>", "n={} divisor={}", n, divisor);
}

void convert_filter(const void* src, DType src_type, FilterLayout src_layout, void* dst, DType dst_type,
                    FilterLayout dst_layout, const FilterShape& shape, cudaStream_t stream) {
  for (DType t : {src_type, dst_type}) {
    if (t != DType::kF32 && t != DType::kBF16) {
      throw_error(ErrorCode::kInvalidArgument, "convert_filter: element type {} is not f32 or bf16",
                  dtype_name(t));
    }
  }
  if (shape.numel() <= 0) return;
  bool src_krsc = src_layout == FilterLayout::kKrsc, dst_krsc = dst_layout == FilterLayout::kKrsc;
  if (is_f32(src_type) && is_f32(dst_type)) {
    launch_filter<float, float>(src, src_krsc, dst, dst_krsc, shape, stream);
  } else if (is_f32(src_type)) {
    launch_filter<float, __nv_bfloat16>(src, src_krsc, dst, dst_krsc, shape, stream);
  } else if (is_f32(dst_type)) {
    launch_filter<__nv_bfloat16, float>(src, src_krsc, dst, dst_krsc, shape, stream);
  } else {
    launch_filter<__nv_bfloat16, __nv_bfloat16>(src, src_krsc, dst, dst_krsc, shape, stream);
  }
}

}  // namespace tandem::backend::cuda
