// precision: bf16's two conversions on the GPU (KernelTable::to_bf16 and
// from_bf16), queued on the context's stream. x and y share shape and memory
// format (ops.cpp), so the flat storage converts element for element whatever
// the format.
#include "engine/backend/cuda/cuda_cast.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"

namespace tandem::backend::cuda {

void to_bf16(Ctx& ctx, const Tensor& x, Tensor& y) {
  cast_f32_to_bf16(x.data<float>(), y.raw_data(), x.numel(), tandem::cuda::cuda_context(ctx).stream());
}

void from_bf16(Ctx& ctx, const Tensor& x, Tensor& y) {
  cast_bf16_to_f32(x.raw_data(), y.data<float>(), x.numel(), tandem::cuda::cuda_context(ctx).stream());
}

}  // namespace tandem::backend::cuda
