// Element access for kernels templated on f32 or bf16 storage (bf16 activations): read as float,
// write rounded to nearest even. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>

namespace tandem::backend::cuda {

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

}  // namespace tandem::backend::cuda
