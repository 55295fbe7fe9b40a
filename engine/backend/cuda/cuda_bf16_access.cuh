// Element access for kernels templated on f32 or bf16 storage (bf16 activations): read as float,
// write rounded to nearest even. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace tandem::backend::cuda {

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// An input whose type is known at run time only (a batch norm's x: f32, or a convolution's bf16
// output): one flag for the whole launch, so every warp takes the same branch, and the kernel count
// does not double as a template parameter would make it.
struct F32OrBf16 {
  const void* data;
  bool bf16;
  __device__ __forceinline__ float operator[](int64_t i) const {
    return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]) : static_cast<const float*>(data)[i];
  }
};

}  // namespace tandem::backend::cuda
