// Column sums of a row-major (rows, cols) matrix: a bias's gradient (linear layers, convolutions as
// matmuls) and layer norm's dbeta.
#pragma once

#include <cstdint>

#include "engine/backend/op_params.h"

namespace tandem::backend::cpu {

// out[j] = the sum over i of g[i * cols + j], in double. Rows go in chunks of a fixed size, each
// added row by row along memory (the parallel work), then the chunks' sums in chunk order: the
// result depends on the shape alone, not on the thread count. g is f32, or bf16 (its widened
// values; a bf16 operand's dy).
void column_sums(const Ctx& ctx, const float* g, int64_t rows, int64_t cols, float* out);
void column_sums(const Ctx& ctx, const uint16_t* g_bf16, int64_t rows, int64_t cols, float* out);

}  // namespace tandem::backend::cpu
