// Elementwise kernels, the full sum and its backward (broadcast_scalar). Operands share shape and
// memory format (ops.cpp checks it), so every op works on the flat storage whatever the format.
// Products and sums are written with __fmul_rn/__fadd_rn so nvcc does not contract them into an FMA:
// the results then match the CPU backend bit for bit.

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/cuda_bn_relu.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_reduce.cuh"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::block_sum;
using tandem::cuda::CudaContext;
using tandem::cuda::global_thread_index;
using tandem::cuda::grid_stride;
using tandem::cuda::kWarpSize;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

// The ops: y[i] = op(a[i], b[i]) (unary ops ignore b).
struct ReluOp {
  // NaN passes through (as x > 0 is false for it) so a diverging model shows NaN, not zeros.
  __device__ float operator()(float x, float) const { return x > 0.0f || isnan(x) ? x : 0.0f; }
};
struct ReluBackwardOp {
  __device__ float operator()(float y, float dy) const { return y > 0.0f ? dy : 0.0f; }
};
struct AddOp {
  __device__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};
struct AddReluOp {  // ReluOp of AddOp, in one pass
  __device__ float operator()(float a, float b) const { return ReluOp{}(__fadd_rn(a, b), 0.0f); }
};
struct MulOp {
  __device__ float operator()(float a, float b) const { return __fmul_rn(a, b); }
};
struct ScaleOp {
  float alpha;
  __device__ float operator()(float x, float) const { return __fmul_rn(alpha, x); }
};
struct AxpyOp {  // a = x, b = y: y + alpha x
  float alpha;
  __device__ float operator()(float x, float y) const { return __fadd_rn(y, __fmul_rn(alpha, x)); }
};

template <typename Op>
__device__ __forceinline__ float4 apply4(const Op& op, float4 a, float4 b) {
  return make_float4(op(a.x, b.x), op(a.y, b.y), op(a.z, b.z), op(a.w, b.w));
}

// kInputs (1 or 2) says whether b is read. `vec`: every pointer is 16-byte aligned, so the bulk
// goes as float4 and the last n % 4 elements one at a time. y may alias a or b (axpy, in place).
template <int kInputs, typename Op>
__global__ void map_kernel(Op op, int64_t n, bool vec, const float* a, const float* b, float* y) {
  int64_t start = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    const auto* a4 = reinterpret_cast<const float4*>(a);
    const auto* b4 = reinterpret_cast<const float4*>(b);
    auto* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = global_thread_index(); i < n4; i += grid_stride()) {
      float4 va = a4[i];
      float4 vb = kInputs == 2 ? b4[i] : va;
      y4[i] = apply4(op, va, vb);
    }
    start = n4 * 4;
  }
  for (int64_t i = start + global_thread_index(); i < n; i += grid_stride()) {
    float va = a[i];
    y[i] = op(va, kInputs == 2 ? b[i] : va);
  }
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int kInputs, typename Op>
void launch_map(Ctx& ctx, const char* name, Op op, const Tensor& a, const Tensor* b, Tensor& y) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t n = y.numel();
  const float* pa = a.data<float>();
  const float* pb = b != nullptr ? b->data<float>() : nullptr;
  float* py = y.data<float>();
  const bool vec = aligned16(pa) && aligned16(pb) && aligned16(py);
  Launch l = launch_for(vec ? (n + 3) / 4 : n);
  map_kernel<kInputs><<<l.blocks, l.threads, 0, cc.stream()>>>(op, n, vec, pa, pb, py);
  TANDEM_CUDA_LAUNCH_CHECK(name, "op={} y={} {} n={}", name, y.shape().str(), memory_format_name(y.format()), n);
}

// y[i] = *src when src is given (read on the device: broadcast_scalar), else value (fill).
__global__ void fill_kernel(int64_t n, float value, const float* src, float* y) {
  const float v = src != nullptr ? *src : value;
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) y[i] = v;
}

void launch_fill(Ctx& ctx, const char* name, float value, const float* src, Tensor& y) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t n = y.numel();
  Launch l = launch_for(n);
  fill_kernel<<<l.blocks, l.threads, 0, cc.stream()>>>(n, value, src, y.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK(name, "op={} y={} {} n={}", name, y.shape().str(), memory_format_name(y.format()), n);
}

// The sum runs in two launches: at most kSumBlocks blocks each write a double partial sum to the
// context's workspace, then one block adds the partials in a fixed order. The block count depends
// on n only, so the result is bitwise the same on every run and every GPU.
constexpr int kSumThreads = 256;
constexpr int64_t kSumBlocks = 1024;

__global__ void sum_partials_kernel(const float* x, int64_t n, double* partials) {
  __shared__ double scratch[kWarpSize];
  double acc = 0.0;
  for (int64_t i = global_thread_index(); i < n; i += grid_stride()) acc += static_cast<double>(x[i]);
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sum_finish_kernel(const double* partials, int count, float* y) {
  __shared__ double scratch[kWarpSize];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) y[0] = static_cast<float>(acc);
}

}  // namespace

void relu_forward(Ctx& ctx, const Tensor& x, Tensor& y) {
  launch_map<1>(ctx, "relu_forward", ReluOp{}, x, nullptr, y);
}

// y may be a bf16 activation (BatchNormParams::bf16_activations).
void relu_backward(Ctx& ctx, const Tensor& y, const Tensor& dy, Tensor& dx) {
  if (y.dtype() == DType::kBF16) {
    CudaContext& cc = tandem::cuda::cuda_context(ctx);
    const Launch l = launch_for(dx.numel());
    launch_bn_relu_mask_bf16(y.raw_data(), dy.data<float>(), dx.data<float>(), dx.numel(), l.blocks, l.threads,
                             cc.stream());
    TANDEM_CUDA_LAUNCH_CHECK("bn_relu_mask_bf16_kernel", "op=relu_backward y={} bf16 n={}", y.shape().str(),
                             dx.numel());
    return;
  }
  launch_map<2>(ctx, "relu_backward", ReluBackwardOp{}, y, &dy, dx);
}

void add(Ctx& ctx, const Tensor& a, const Tensor& b, Tensor& y) { launch_map<2>(ctx, "add", AddOp{}, a, &b, y); }

void add_relu(Ctx& ctx, const Tensor& a, const Tensor& b, Tensor& y) {
  launch_map<2>(ctx, "add_relu", AddReluOp{}, a, &b, y);
}

void mul(Ctx& ctx, const Tensor& a, const Tensor& b, Tensor& y) { launch_map<2>(ctx, "mul", MulOp{}, a, &b, y); }

void scale(Ctx& ctx, const Tensor& x, float alpha, Tensor& y) {
  launch_map<1>(ctx, "scale", ScaleOp{alpha}, x, nullptr, y);
}

void axpy(Ctx& ctx, float alpha, const Tensor& x, Tensor& y) {
  launch_map<2>(ctx, "axpy", AxpyOp{alpha}, x, &y, y);
}

void fill(Ctx& ctx, float value, Tensor& y) { launch_fill(ctx, "fill", value, nullptr, y); }

void broadcast_scalar(Ctx& ctx, const Tensor& s, Tensor& y) {
  launch_fill(ctx, "broadcast_scalar", 0.0f, s.data<float>(), y);
}

void sum(Ctx& ctx, const Tensor& x, Tensor& y) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const int64_t n = x.numel();
  int64_t blocks = (n + kSumThreads - 1) / kSumThreads;
  blocks = blocks < 1 ? 1 : (blocks > kSumBlocks ? kSumBlocks : blocks);
  auto* partials = static_cast<double*>(cc.workspace(static_cast<size_t>(blocks) * sizeof(double)));
  sum_partials_kernel<<<static_cast<unsigned>(blocks), kSumThreads, 0, cc.stream()>>>(x.data<float>(), n, partials);
  TANDEM_CUDA_LAUNCH_CHECK("sum_partials_kernel", "op=sum x={} {} blocks={}", x.shape().str(),
                           memory_format_name(x.format()), blocks);
  sum_finish_kernel<<<1, kSumThreads, 0, cc.stream()>>>(partials, static_cast<int>(blocks), y.data<float>());
  TANDEM_CUDA_LAUNCH_CHECK("sum_finish_kernel", "op=sum x={} {} partials={}", x.shape().str(),
                           memory_format_name(x.format()), blocks);
}

}  // namespace tandem::backend::cuda
