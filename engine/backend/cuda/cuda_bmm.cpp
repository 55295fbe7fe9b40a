// Batched matrix products (c[i] = op(a[i]) op(b[i]), a batch of 1 shared by every product) through
// cublasGemmStridedBatchedEx: a shared operand has batch stride 0, so nothing is copied. Row-major
// tensors against cuBLAS's column-major convention as in cuda_matmul.cpp: the product is computed
// as c^T = op(b)^T op(a)^T. Precision as there: fp32 true f32, tf32 the fast-TF32 compute type, bf16
// through bf16 copies of a and b with f32 accumulation and output.
#include <climits>
#include <cstdint>

#include "engine/backend/cuda/cuda_cast.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/core/error.h"

namespace tandem::backend::cuda {
namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

void batched_matmul(Ctx& ctx, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& c) {
  tandem::cuda::CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t batch = c.dim(0), m = c.dim(1), n = c.dim(2);
  const int64_t k = transpose_a ? a.dim(1) : a.dim(2);
  if (batch * m * n == 0) return;
  if (k == 0) {
    TANDEM_CUDA_CHECK(cudaMemsetAsync(c.raw_data(), 0, c.nbytes(), cc.stream()), "op=batched_matmul c={}",
                      c.shape().str());
    return;
  }
  for (int64_t v : {batch, m, n, k}) {
    TANDEM_CHECK(v <= INT32_MAX, ErrorCode::kInvalidArgument,
                 "batched_matmul: a {} b {} c {} has a dimension beyond cuBLAS's int range", a.shape().str(),
                 b.shape().str(), c.shape().str());
  }
  const Precision precision = ctx.options().precision;
  const bool bf16 = precision == Precision::kBf16;
  const void* pa = a.raw_data();
  const void* pb = b.raw_data();
  if (bf16) {
    char* base = static_cast<char*>(cc.workspace(align_up(static_cast<size_t>(a.numel()) * 2) +
                                                 align_up(static_cast<size_t>(b.numel()) * 2)));
    void* a16 = base;
    void* b16 = base + align_up(static_cast<size_t>(a.numel()) * 2);
    cast_f32_to_bf16(a.data<float>(), a16, a.numel(), cc.stream());
    cast_f32_to_bf16(b.data<float>(), b16, b.numel(), cc.stream());
    pa = a16;
    pb = b16;
  }
  const cudaDataType_t in_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute = precision == Precision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  // cuBLAS's A is our b, its B our a (see the top of the file).
  const cublasOperation_t op_a = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t lda = transpose_b ? k : n, ldb = transpose_a ? m : k;
  const int64_t stride_a = b.dim(0) == 1 ? 0 : k * n, stride_b = a.dim(0) == 1 ? 0 : m * k;
  const float alpha = 1.0f, beta = 0.0f;
  TANDEM_CUBLAS_CHECK(
      cublasGemmStridedBatchedEx(cc.cublas(), op_a, op_b, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                 &alpha, pb, in_type, static_cast<int>(lda), stride_a, pa, in_type,
                                 static_cast<int>(ldb), stride_b, &beta, c.raw_data(), CUDA_R_32F, static_cast<int>(n),
                                 m * n, static_cast<int>(batch), compute, CUBLAS_GEMM_DEFAULT),
      "op=batched_matmul a={} b={} transpose_a={} transpose_b={} c={} precision={}", a.shape().str(), b.shape().str(),
      transpose_a, transpose_b, c.shape().str(), precision_name(precision));
}

}  // namespace tandem::backend::cuda
