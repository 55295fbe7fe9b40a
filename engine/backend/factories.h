// Tensor factories on the context's device, as torch.zeros, ones, full, arange, rand and randn:
// filled by the device's own kernels (no host buffer, nothing read back), the random ones from the
// context's generator through a counter-based stream, so a CPU and a GPU context seeded alike draw
// the same numbers.
#pragma once

#include <optional>

#include "engine/core/context.h"
#include "engine/core/tensor.h"

namespace tandem::backend {

// dtype: f32, bf16 or i64 (an i64 value must be a whole number within int64's range).
Tensor zeros(ExecutionContext& ctx, const Shape& shape, DType dtype = DType::kF32);
Tensor ones(ExecutionContext& ctx, const Shape& shape, DType dtype = DType::kF32);
Tensor full(ExecutionContext& ctx, const Shape& shape, double value, DType dtype = DType::kF32);

// [start, end) in steps of `step`: ceil((end - start) / step) values, start + i step. Without a
// dtype, as torch.arange: i64 when start, end and step are whole numbers, else f32.
Tensor arange(ExecutionContext& ctx, double start, double end, double step = 1.0,
              std::optional<DType> dtype = std::nullopt);
Tensor arange(ExecutionContext& ctx, double end, std::optional<DType> dtype = std::nullopt);  // from 0

// f32 uniform in [0, 1) (torch.rand) and standard normal (torch.randn), each call drawing a fresh
// seed from ctx.generator().
Tensor rand(ExecutionContext& ctx, const Shape& shape);
Tensor randn(ExecutionContext& ctx, const Shape& shape);

}  // namespace tandem::backend
