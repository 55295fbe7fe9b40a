// Element-type and filter-layout conversions queued on a stream (and a bf16 average's division), for kernels that hand a library a
// different representation than our tensors hold: bf16 copies of f32 tensors (bf16 autocast, whose
// master values stay f32 in memory) and KRSC copies of our KCRS filters.
// Plain C++ interface (no CUDA device types), so .cpp files include it; the kernels live in cuda_cast.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/core/dtype.h"

namespace tandem::backend::cuda {

// dst[i] = bf16(src[i]) for n elements, rounded to nearest even (NaN stays NaN, overflow becomes inf).
void cast_f32_to_bf16(const float* src, void* dst_bf16, int64_t n, cudaStream_t stream);
// dst[i] = float(src[i]) for n elements: exact.
void cast_bf16_to_f32(const void* src_bf16, float* dst, int64_t n, cudaStream_t stream);
// data[i] = bf16(float(data[i]) / divisor) in place, rounded to nearest even (a bf16 average).
void divide_bf16(void* data_bf16, int64_t n, float divisor, cudaStream_t stream);

// How the four dimensions of a filter lie in memory: KCRS is our (K, C/groups, R, S) weight layout,
// KRSC what cuDNN calls an NHWC filter.
enum class FilterLayout : uint8_t { kKcrs, kKrsc };

struct FilterShape {
  int64_t k = 0, c = 0, r = 0, s = 0;  // c counts the channels of one group
  int64_t numel() const { return k * c * r * s; }
};

// Copies a filter from one layout and element type to another (each side f32 or bf16; any pair,
// including a plain cast when the layouts match). src and dst must not overlap.
void convert_filter(const void* src, DType src_type, FilterLayout src_layout, void* dst, DType dst_type,
                    FilterLayout dst_layout, const FilterShape& shape, cudaStream_t stream);

}  // namespace tandem::backend::cuda
