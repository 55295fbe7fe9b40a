// What precision: bf16 (autocast) asks of the CPU kernels: the products of convolutions and matmuls
// take bf16 copies of their f32 operands (rounded to nearest even, in the same layout) and
// accumulate and write in f32, so tensors between ops, weights and gradients stay f32.
#pragma once

#include "engine/backend/cpu/dnnl_util.h"

namespace tandem::backend::cpu {

// Whether this context's convolutions and matmuls compute in bf16.
bool computes_in_bf16(const Ctx& ctx);

// A bf16 copy of the f32 tensor t: same shape and memory format, from the caching allocator.
Tensor bf16_copy(Ctx& ctx, const Tensor& t);
// t when it is bf16 already (a caller's bf16_operand), else its bf16 copy.
Tensor bf16_of(Ctx& ctx, const Tensor& t);
// t when it is f32, else its bf16 values widened into an f32 copy (a bf16 activation read by a
// kernel that reads f32 only).
Tensor f32_of(Ctx& ctx, const Tensor& t);
// out[i] = in[i] rounded to the nearest bf16 (ties to even); NaN stays NaN.
void round_to_bf16(Ctx& ctx, const float* in, uint16_t* out, int64_t n);
// The same on the calling thread alone (inside a parallel region).
void round_to_bf16_serial(const float* in, uint16_t* out, int64_t n);

// md with its element type changed to bf16 (same dimensions, same strides or blocking).
memory::desc as_bf16(const memory::desc& md);

}  // namespace tandem::backend::cpu
