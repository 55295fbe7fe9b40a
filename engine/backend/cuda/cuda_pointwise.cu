// Pointwise kernels of N-D tensors on the GPU: broadcasting add, sub, mul and div (each operand
// read through its coalesced broadcast view), the unary functions and their derivatives, and
// masked_fill (a unary op reads x and writes y in f32 or bf16). Products and sums use __fmul_rn /
// __fadd_rn (no FMA contraction), so these agree with the CPU backend to the last bit where the CPU
// computes the same expression.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/cuda_bf16_access.cuh"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_reduce.cuh"
#include "engine/backend/nd_index.h"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::global_thread_index;
using tandem::cuda::grid_stride;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

__device__ __forceinline__ float apply(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd: return __fadd_rn(a, b);
    case BinaryOp::kSub: return __fsub_rn(a, b);
    case BinaryOp::kMul: return __fmul_rn(a, b);
    default: return __fdiv_rn(a, b);
  }
}

// same: both operands have y's shape (flat indexing, no view arithmetic).
__global__ void binary_kernel(BinaryOp op, NdView va, NdView vb, bool same, const float* a, const float* b, float* y,
                              int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    y[i] = same ? apply(op, a[i], b[i]) : apply(op, a[va.offset(i)], b[vb.offset(i)]);
  }
}

constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kGeluTanhK = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kGeluTanhA = 0.044715f;

__device__ __forceinline__ float unary_value(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::kExp: return expf(x);
    case UnaryOp::kLog: return logf(x);
    case UnaryOp::kSqrt: return sqrtf(x);
    case UnaryOp::kRsqrt: return 1.0f / sqrtf(x);
    case UnaryOp::kTanh: return tanhf(x);
    case UnaryOp::kGeluErf: return 0.5f * x * (1.0f + erff(x * kSqrtHalf));
    case UnaryOp::kGeluTanh: return 0.5f * x * (1.0f + tanhf(kGeluTanhK * (x + kGeluTanhA * x * x * x)));
    case UnaryOp::kSigmoid: return 1.0f / (1.0f + expf(-x));
    case UnaryOp::kSilu: return x / (1.0f + expf(-x));
    case UnaryOp::kAbs: return fabsf(x);
    case UnaryOp::kSin: return sinf(x);
    default: return cosf(x);  // kCos
  }
}

// f'(x), given y = f(x) where that is cheaper.
__device__ __forceinline__ float unary_derivative(UnaryOp op, float x, float y) {
  switch (op) {
    case UnaryOp::kExp: return y;
    case UnaryOp::kLog: return 1.0f / x;
    case UnaryOp::kSqrt: return 0.5f / y;
    case UnaryOp::kRsqrt: return -0.5f * y * y * y;
    case UnaryOp::kTanh: return 1.0f - y * y;
    case UnaryOp::kGeluErf: return 0.5f * (1.0f + erff(x * kSqrtHalf)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
    case UnaryOp::kGeluTanh: {
      const float t = tanhf(kGeluTanhK * (x + kGeluTanhA * x * x * x));
      return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluTanhK * (1.0f + 3.0f * kGeluTanhA * x * x);
    }
    case UnaryOp::kSigmoid: return y * (1.0f - y);
    case UnaryOp::kSilu: {
      const float s = 1.0f / (1.0f + expf(-x));
      return s * (1.0f + x * (1.0f - s));
    }
    case UnaryOp::kAbs: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
    case UnaryOp::kSin: return cosf(x);
    default: return -sinf(x);  // kCos
  }
}

// x and y f32 or bf16 (a flag for the whole launch): a linear layer's bf16 output in, a GELU's bf16
// output out, rounded once.
__global__ void unary_kernel(UnaryOp op, F32OrBf16 x, void* y, bool y_bf16, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    const float v = unary_value(op, x[i]);
    if (y_bf16) {
      store(static_cast<__nv_bfloat16*>(y) + i, v);
    } else {
      static_cast<float*>(y)[i] = v;
    }
  }
}

__global__ void unary_backward_kernel(UnaryOp op, F32OrBf16 x, const float* y, const float* dy, float* dx,
                                      int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) {
    dx[i] = dy[i] * unary_derivative(op, x[i], y[i]);
  }
}

__global__ void masked_fill_kernel(NdView vm, const float* x, const uint8_t* mask, float value, float* y, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) y[i] = mask[vm.offset(i)] != 0 ? value : x[i];
}

}  // namespace

void binary(Ctx& ctx, BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  NdView va = broadcast_view(a.shape(), y.shape()), vb = broadcast_view(b.shape(), y.shape());
  NdView* views[] = {&va, &vb};
  coalesce(views);
  const bool same = a.numel() == n && b.numel() == n;
  const Launch l = launch_for(n);
  binary_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(op, va, vb, same, a.data<float>(), b.data<float>(),
                                                         y.data<float>(), n);
  TANDEM_CUDA_LAUNCH_CHECK("binary_kernel", "op={} a={} b={}", static_cast<int>(op), a.shape().str(), b.shape().str());
}

void unary(Ctx& ctx, UnaryOp op, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Launch l = launch_for(n);
  const bool x_bf16 = x.dtype() == DType::kBF16, y_bf16 = y.dtype() == DType::kBF16;
  unary_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(op, F32OrBf16{x.raw_data(), x_bf16}, y.raw_data(), y_bf16, n);
  TANDEM_CUDA_LAUNCH_CHECK("unary_kernel", "op={} x={} x_bf16={} y_bf16={}", static_cast<int>(op), x.shape().str(),
                           x_bf16, y_bf16);
}

void unary_backward(Ctx& ctx, UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) {
  const int64_t n = x.numel();
  if (n == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Launch l = launch_for(n);
  const bool x_bf16 = x.dtype() == DType::kBF16;
  unary_backward_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(op, F32OrBf16{x.raw_data(), x_bf16}, y.data<float>(),
                                                                 dy.data<float>(), dx.data<float>(), n);
  TANDEM_CUDA_LAUNCH_CHECK("unary_backward_kernel", "op={} x={} x_bf16={}", static_cast<int>(op), x.shape().str(),
                           x_bf16);
}

void masked_fill(Ctx& ctx, const Tensor& x, const Tensor& mask, float value, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  NdView vm = broadcast_view(mask.shape(), x.shape());
  NdView* views[] = {&vm};
  coalesce(views);
  const Launch l = launch_for(n);
  masked_fill_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(vm, x.data<float>(), mask.data<uint8_t>(), value,
                                                              y.data<float>(), n);
  TANDEM_CUDA_LAUNCH_CHECK("masked_fill_kernel", "x={} mask={}", x.shape().str(), mask.shape().str());
}

}  // namespace tandem::backend::cuda
