// Max and average pooling through cuDNN (v7-style API), average backward through our own kernel.
//
// Max: CUDNN_POOLING_MAX, or CUDNN_POOLING_MAX_DETERMINISTIC under options().deterministic (the
// plain mode's backward may scatter overlapping windows with atomics). Padded cells never win
// (cuDNN pads max pooling with -inf). cudnnPoolingBackward wants x, y and dy; the op's backward
// gets x and dy, so the forward keeps a copy of y in its workspace (a u8 tensor of y's bytes: the
// op checks the workspace is u8, so y itself cannot be handed over).
//
// Average: CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING or _EXCLUDE_PADDING per count_include_pad
// for the forward. The backward op gets only dy and dx; rather than hand cuDNN stand-ins for x and
// y, cuda_pool_avg.cu gathers each dx element from the windows covering it (deterministic, no
// atomics, reads nothing but dy).
//
// Output sizes use the floor rule (no ceil mode), which is also what cuDNN derives.
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string_view>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_pool_avg.h"
#include "engine/backend/cuda/cudnn_descriptors.h"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::cuda_context;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;

struct PoolPlan {
  TensorDescriptor x;  // x and dx
  TensorDescriptor y;  // y and dy
  PoolingDescriptor pool;
};

// N, C, H, W, format, kernel (2), stride (2), padding (2), cuDNN mode.
using PoolKey = std::array<int64_t, 12>;

struct PoolState {
  std::map<PoolKey, PoolPlan> plans;  // node-based: plan addresses stay valid as it grows
};

int to_int(int64_t v, std::string_view op, const Tensor& x) {
  TANDEM_CHECK(v <= INT32_MAX, ErrorCode::kInvalidArgument, "{}: x {} or its pooling parameters exceed cuDNN's int range",
               op, x.shape().str());
  return static_cast<int>(v);
}

cudnnPoolingMode_t max_mode(const CudaContext& cc) {
  return cc.options().deterministic ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_MAX;
}

cudnnPoolingMode_t avg_mode(const Pool2dParams& p) {
  return p.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                             : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
}

void set_tensor(cudnnTensorDescriptor_t desc, std::string_view op, const Tensor& t, const Tensor& x) {
  cudnnTensorFormat_t format = t.format() == MemoryFormat::kChannelsLast ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  TANDEM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc, format, CUDNN_DATA_FLOAT, to_int(t.dim(0), op, x),
                                                to_int(t.dim(1), op, x), to_int(t.dim(2), op, x),
                                                to_int(t.dim(3), op, x)),
                     "op={} tensor={} format={}", op, t.shape().str(), memory_format_name(t.format()));
}

// x is the pooling input (or dx), y its output (or dy): same format, as ops.cpp guarantees.
const PoolPlan& plan_for(CudaContext& cc, std::string_view op, const Pool2dParams& p, cudnnPoolingMode_t mode,
                         const Tensor& x, const Tensor& y) {
  PoolKey key{x.dim(0),    x.dim(1),    x.dim(2),     x.dim(3),     static_cast<int64_t>(x.format()), p.kernel[0],
              p.kernel[1], p.stride[0], p.stride[1], p.padding[0], p.padding[1],                     mode};
  auto [it, created] = cc.state<PoolState>().plans.try_emplace(key);
  if (!created) return it->second;
  PoolPlan& plan = it->second;
  try {
    set_tensor(plan.x.get(), op, x, x);
    set_tensor(plan.y.get(), op, y, x);
    // PROPAGATE_NAN: a NaN in a window reaches the loss instead of being skipped.
    TANDEM_CUDNN_CHECK(cudnnSetPooling2dDescriptor(plan.pool.get(), mode, CUDNN_PROPAGATE_NAN,
                                                   to_int(p.kernel[0], op, x), to_int(p.kernel[1], op, x),
                                                   to_int(p.padding[0], op, x), to_int(p.padding[1], op, x),
                                                   to_int(p.stride[0], op, x), to_int(p.stride[1], op, x)),
                       "op={} x={} kernel=({}, {}) stride=({}, {}) padding=({}, {})", op, x.shape().str(),
                       p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0], p.padding[1]);
  } catch (...) {
    cc.state<PoolState>().plans.erase(it);  // no half-made plan stays cached
    throw;
  }
  return plan;
}

void pool_forward(CudaContext& cc, std::string_view op, const Pool2dParams& p, cudnnPoolingMode_t mode,
                  const Tensor& x, Tensor& y) {
  if (y.numel() == 0) return;
  if (x.numel() == 0) {  // only padding under every window (cuDNN takes no zero-sized tensor)
    bool max = mode != CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING && mode != CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    fill(cc.context(), max ? -INFINITY : 0.0f, y);
    return;
  }
  const PoolPlan& plan = plan_for(cc, op, p, mode, x, y);
  TANDEM_CUDNN_CHECK(cudnnPoolingForward(cc.cudnn(), plan.pool.get(), &kOne, plan.x.get(), x.raw_data(), &kZero,
                                         plan.y.get(), y.raw_data()),
                     "op={} x={} y={} format={} kernel=({}, {}) stride=({}, {}) padding=({}, {})", op,
                     x.shape().str(), y.shape().str(), memory_format_name(x.format()), p.kernel[0], p.kernel[1],
                     p.stride[0], p.stride[1], p.padding[0], p.padding[1]);
}

}  // namespace

void max_pool2d_forward(Ctx& ctx, const Pool2dParams& p, const Tensor& x, Tensor& y, Tensor& workspace) {
  constexpr std::string_view op = "max_pool2d_forward";
  CudaContext& cc = cuda_context(ctx);
  pool_forward(cc, op, p, max_mode(cc), x, y);
  // The backward's copy of y, queued on the same stream after the pooling that wrote it.
  workspace = Tensor::empty({static_cast<int64_t>(y.nbytes())}, DType::kU8, ctx.device());
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(workspace.raw_data(), y.raw_data(), y.nbytes(), cudaMemcpyDeviceToDevice,
                                    cc.stream()),
                    "op={} (saving y) y={} bytes={}", op, y.shape().str(), y.nbytes());
}

void max_pool2d_backward(Ctx& ctx, const Pool2dParams& p, const Tensor& x, const Tensor& dy, const Tensor& workspace,
                         Tensor& dx) {
  constexpr std::string_view op = "max_pool2d_backward";
  CudaContext& cc = cuda_context(ctx);
  TANDEM_CHECK(workspace.nbytes() == dy.nbytes(), ErrorCode::kInvalidArgument,
               "{}: workspace has {} bytes but the forward of x {} keeps y of {} bytes", op, workspace.nbytes(),
               x.shape().str(), dy.nbytes());
  if (dx.numel() == 0) return;
  if (dy.numel() == 0 || x.numel() == 0) {  // nothing flows back (cuDNN takes no zero-sized tensor)
    TANDEM_CUDA_CHECK(cudaMemsetAsync(dx.raw_data(), 0, dx.nbytes(), cc.stream()), "op={} dx={}", op,
                      dx.shape().str());
    return;
  }
  const PoolPlan& plan = plan_for(cc, op, p, max_mode(cc), x, dy);
  // y (the saved copy) lies like dy: same shape, same format.
  TANDEM_CUDNN_CHECK(cudnnPoolingBackward(cc.cudnn(), plan.pool.get(), &kOne, plan.y.get(), workspace.raw_data(),
                                          plan.y.get(), dy.raw_data(), plan.x.get(), x.raw_data(), &kZero,
                                          plan.x.get(), dx.raw_data()),
                     "op={} x={} dy={} format={} kernel=({}, {}) stride=({}, {}) padding=({}, {})", op,
                     x.shape().str(), dy.shape().str(), memory_format_name(x.format()), p.kernel[0], p.kernel[1],
                     p.stride[0], p.stride[1], p.padding[0], p.padding[1]);
}

void avg_pool2d_forward(Ctx& ctx, const Pool2dParams& p, const Tensor& x, Tensor& y) {
  CudaContext& cc = cuda_context(ctx);
  pool_forward(cc, "avg_pool2d_forward", p, avg_mode(p), x, y);
}

void avg_pool2d_backward(Ctx& ctx, const Pool2dParams& p, const Tensor& dy, Tensor& dx) {
  CudaContext& cc = cuda_context(ctx);
  AvgPoolGeometry g{dx.dim(0),   dx.dim(1),   dx.dim(2),    dx.dim(3),    dy.dim(2),
                    dy.dim(3),   p.kernel[0], p.kernel[1],  p.stride[0],  p.stride[1],
                    p.padding[0], p.padding[1], p.count_include_pad, dx.format() == MemoryFormat::kChannelsLast};
  Launch l = launch_for(dx.numel());
  launch_avg_pool2d_backward(g, dy.data<float>(), dx.data<float>(), l.blocks, l.threads, cc.stream());
  TANDEM_CUDA_LAUNCH_CHECK("avg_pool2d_backward_kernel",
                           "op=avg_pool2d_backward dy={} dx={} format={} kernel=({}, {}) stride=({}, {}) "
                           "padding=({}, {}) count_include_pad={}",
                           dy.shape().str(), dx.shape().str(), memory_format_name(dx.format()), p.kernel[0],
                           p.kernel[1], p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.count_include_pad);
}

}  // namespace tandem::backend::cuda
