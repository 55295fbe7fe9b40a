// Batch normalization through cuDNN: training with batch statistics (running averages updated in
// place by cuDNN, with the unbiased variance and exponentialAverageFactor = momentum), inference
// from the running statistics, and backward writing dgamma and dbeta (not accumulating).
//
// NHWC training and backward go through the Ex calls (cudnnBatchNormalizationForwardTrainingEx,
// cudnnBatchNormalizationBackwardEx) in CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode, as PyTorch does
// for channels_last: cuDNN's fast NHWC kernels are behind them. The v7-style calls in NHWC ran
// ResNet-50's 53 batch norms at 16 ms per forward and 8 ms per backward on an H200 (2026-12-04),
// about 50 times slower than the memory traffic needs. NCHW, inference, and any NHWC shape the Ex
// calls refuse use the v7-style calls (CUDNN_BATCHNORM_SPATIAL; persistent's overflow caveat, a
// scaled integer reduction with a narrower range, is documented for NCHW only).
//
// saved.workspace holds [beta copy | reserve space] when the forward went through an Ex call (the
// fused backward reads the bias, which the backward op is not given); its being defined is how the
// backward knows. Fused ReLU (CUDNN_BATCHNORM_OPS_BN_ACTIVATION): cuDNN documents the kernel for
// half precision, and TensorFlow and Paddle use it for fp16 only, so f32 (all our tensors today)
// takes OPS_BN and then our ReLU kernel; backward masks dy by y > 0 first. A refusal of either ops
// (at the size queries or the first call) sends that shape down the next path for good.
//
// bf16 activations (a bf16 x, y, dx or shortcut: BatchNormParams::bf16_activations, a convolution
// asked for bf16 output) take our own
// kernels instead (cuda_batchnorm_bf16.cu): cuDNN's batch norm reads and writes one type.
#include <array>
#include <cstdint>
#include <map>
#include <string_view>

#include <spdlog/spdlog.h>

#include "engine/backend/cuda/cuda_bn_relu.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cudnn_descriptors.h"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::cuda_context;
using tandem::cuda::Launch;
using tandem::cuda::launch_for;

constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;
constexpr size_t kAlign = 256;  // cuDNN buffers start on 256-byte boundaries, as cudaMalloc's do

size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Whether an Ex path (one per ops) serves a shape: unknown until its sizes are asked.
enum class ExState { kUntried, kAvailable, kRefused };

struct ExPath {
  ExState state = ExState::kUntried;
  size_t forward_workspace = 0;
  size_t backward_workspace = 0;
  size_t reserve = 0;
};

// Everything cuDNN needs for one shape and format, made once per context.
struct BnPlan {
  TensorDescriptor x;      // x, y, dy, dx
  TensorDescriptor param;  // (1, C, 1, 1): gamma, beta, means, variances and their gradients
  ActivationDescriptor relu;
  ExPath plain;  // CUDNN_BATCHNORM_OPS_BN
  ExPath fused;  // CUDNN_BATCHNORM_OPS_BN_ACTIVATION
};

using BnKey = std::array<int64_t, 5>;  // N, C, H, W, format

struct BnState {
  std::map<BnKey, BnPlan> plans;  // node-based: plan addresses stay valid as it grows
};

int to_int(int64_t v, std::string_view op, const Tensor& x) {
  TANDEM_CHECK(v <= INT32_MAX, ErrorCode::kInvalidArgument, "{}: x {} has a dimension beyond cuDNN's int range", op,
               x.shape().str());
  return static_cast<int>(v);
}

cudnnBatchNormMode_t training_mode(const Tensor& x) {
  return x.format() == MemoryFormat::kChannelsLast ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
}

BnPlan& plan_for(CudaContext& cc, std::string_view op, const Tensor& x) {
  BnKey key{x.dim(0), x.dim(1), x.dim(2), x.dim(3), static_cast<int64_t>(x.format())};
  auto [it, created] = cc.state<BnState>().plans.try_emplace(key);
  if (!created) return it->second;
  BnPlan& plan = it->second;
  try {
    cudnnTensorFormat_t format = x.format() == MemoryFormat::kChannelsLast ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    TANDEM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.x.get(), format, CUDNN_DATA_FLOAT, to_int(x.dim(0), op, x),
                                                  to_int(x.dim(1), op, x), to_int(x.dim(2), op, x),
                                                  to_int(x.dim(3), op, x)),
                       "op={} x={} format={}", op, x.shape().str(), memory_format_name(x.format()));
    // SPATIAL and SPATIAL_PERSISTENT derive the same 1xCx1x1 f32 descriptor.
    TANDEM_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(plan.param.get(), plan.x.get(), training_mode(x)),
                       "op={} x={} format={}", op, x.shape().str(), memory_format_name(x.format()));
    // PROPAGATE_NAN: a NaN reaches the loss instead of being hidden, as in the unfused kernel.
    TANDEM_CUDNN_CHECK(cudnnSetActivationDescriptor(plan.relu.get(), CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
                       "op={} x={}", op, x.shape().str());
  } catch (...) {
    cc.state<BnState>().plans.erase(it);  // no half-made plan stays cached
    throw;
  }
  return plan;
}

// cuDNN's "no" to an Ex call. Refusals come as NOT_SUPPORTED or, for some versions and shapes, as
// BAD_PARAM; either sends this shape down the next path, which checks its own parameters, so a
// real mistake in an Ex call costs speed (and leaves a debug log line), never values.
bool refused(cudnnStatus_t status) {
  cudnnStatus_t category = static_cast<cudnnStatus_t>(CUDNN_STATUS_CATEGORY(status));
  return category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM;
}

std::string_view ops_name(cudnnBatchNormOps_t ops) {
  return ops == CUDNN_BATCHNORM_OPS_BN_ACTIVATION ? "fused BN+ReLU" : "BN";
}

ExPath& path_of(BnPlan& plan, cudnnBatchNormOps_t ops) {
  return ops == CUDNN_BATCHNORM_OPS_BN_ACTIVATION ? plan.fused : plan.plain;
}

// Taking cuDNN's "no" to this shape on this path: the next path gives the same values, slower.
void decline(ExPath& path, cudnnBatchNormOps_t ops, std::string_view op, const Tensor& x, std::string_view stage,
             cudnnStatus_t status) {
  path.state = ExState::kRefused;
  spdlog::debug("{}: cuDNN's Ex call ({}) refuses x {} ({}: {}); taking the next path", op, ops_name(ops),
                x.shape().str(), stage, cudnnGetErrorString(status));
}

// Whether the Ex call with `ops` serves this shape; asks cuDNN the sizes once and remembers.
bool ex_available(CudaContext& cc, BnPlan& plan, cudnnBatchNormOps_t ops, std::string_view op, const Tensor& x) {
  ExPath& path = path_of(plan, ops);
  if (path.state != ExState::kUntried) return path.state == ExState::kAvailable;
  path.state = ExState::kRefused;
  if (x.format() != MemoryFormat::kChannelsLast) return false;
  // An f32 call cuDNN accepted but ran without the activation would be silently wrong (see above).
  if (ops == CUDNN_BATCHNORM_OPS_BN_ACTIVATION && (x.dtype() == DType::kF32 || x.dim(1) % 4 != 0)) return false;
  constexpr cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  cudnnHandle_t handle = cc.cudnn();
  cudnnTensorDescriptor_t xd = plan.x.get();
  cudnnActivationDescriptor_t act = ops == CUDNN_BATCHNORM_OPS_BN_ACTIVATION ? plan.relu.get() : nullptr;
  cudnnStatus_t status = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      handle, mode, ops, xd, nullptr, xd, plan.param.get(), act, &path.forward_workspace);
  if (status == CUDNN_STATUS_SUCCESS) {
    status = cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, mode, ops, xd, xd, xd, nullptr, xd,
                                                               plan.param.get(), act, &path.backward_workspace);
  }
  if (status == CUDNN_STATUS_SUCCESS) {
    status = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, ops, act, xd, &path.reserve);
  }
  if (refused(status)) {
    decline(path, ops, op, x, "size query", status);
    return false;
  }
  TANDEM_CUDNN_CHECK(status, "op={} ({} sizes) x={} format={}", op, ops_name(ops), x.shape().str(),
                     memory_format_name(x.format()));
  path.state = ExState::kAvailable;
  return true;
}

// A workspace pointer that is never null: cuDNN documents that the Ex call with a null workspace of
// size 0 acts as the plain call, and the plain call has no activation to apply.
void* ex_workspace(CudaContext& cc, size_t bytes) { return cc.workspace(bytes > 0 ? bytes : kAlign); }

// Training forward through the Ex call with `ops`; false (having changed nothing the caller sees)
// when cuDNN refuses this shape.
bool ex_forward(Ctx& ctx, CudaContext& cc, BnPlan& plan, cudnnBatchNormOps_t ops, const BatchNormParams& p,
                const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                Tensor& y, BatchNormSaved& saved) {
  constexpr std::string_view op = "batchnorm_forward_training";
  if (!ex_available(cc, plan, ops, op, x)) return false;
  ExPath& path = path_of(plan, ops);
  size_t beta_bytes = beta.nbytes();
  size_t offset = round_up(beta_bytes);
  Tensor workspace = Tensor::empty({static_cast<int64_t>(offset + path.reserve)}, DType::kU8, ctx.device());
  auto* base = static_cast<unsigned char*>(workspace.raw_data());
  cudnnTensorDescriptor_t xd = plan.x.get();
  cudnnActivationDescriptor_t act = ops == CUDNN_BATCHNORM_OPS_BN_ACTIVATION ? plan.relu.get() : nullptr;
  // resultSaveMean / resultSaveInvVariance are the batch mean and 1 / sqrt(biased variance + eps):
  // exactly saved.mean and saved.invstd.
  cudnnStatus_t status = cudnnBatchNormalizationForwardTrainingEx(
      cc.cudnn(), CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, &kOne, &kZero, xd, x.raw_data(), nullptr, nullptr, xd,
      y.raw_data(), plan.param.get(), gamma.raw_data(), beta.raw_data(), static_cast<double>(p.momentum),
      running_mean.raw_data(), running_var.raw_data(), static_cast<double>(p.eps), saved.mean.raw_data(),
      saved.invstd.raw_data(), act, ex_workspace(cc, path.forward_workspace), path.forward_workspace, base + offset,
      path.reserve);
  if (refused(status)) {  // refused before any work was queued: take the next path from now on
    decline(path, ops, op, x, "forward", status);
    return false;
  }
  TANDEM_CUDNN_CHECK(status, "op={} ({}) x={} format={} eps={} momentum={}", op, ops_name(ops), x.shape().str(),
                     memory_format_name(x.format()), p.eps, p.momentum);
  // Queued after the forward (which only reads beta), so a refusal above leaves nothing in flight.
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(base, beta.raw_data(), beta_bytes, cudaMemcpyDeviceToDevice, cc.stream()),
                    "op={} (saving beta) x={} bytes={}", op, x.shape().str(), beta_bytes);
  saved.workspace = workspace;
  return true;
}

void relu_in_place(CudaContext& cc, std::string_view op, Tensor& y) {
  Launch l = launch_for(y.numel());
  launch_bn_relu_in_place(y.data<float>(), y.numel(), l.blocks, l.threads, cc.stream());
  TANDEM_CUDA_LAUNCH_CHECK("bn_relu_in_place_kernel", "op={} y={} format={}", op, y.shape().str(),
                           memory_format_name(y.format()));
}

// Backward through the Ex call with `ops` (grad: dy, or dy masked by the ReLU under OPS_BN); false
// when cuDNN refuses it.
bool ex_backward(CudaContext& cc, BnPlan& plan, cudnnBatchNormOps_t ops, const BatchNormParams& p, const Tensor& x,
                 const Tensor& y, const void* grad, const Tensor& gamma, const BatchNormSaved& saved, Tensor& dx,
                 Tensor& dgamma, Tensor& dbeta) {
  constexpr std::string_view op = "batchnorm_backward";
  if (!ex_available(cc, plan, ops, op, x)) return false;
  ExPath& path = path_of(plan, ops);
  size_t offset = round_up(gamma.nbytes());
  TANDEM_CHECK(saved.workspace.nbytes() == offset + path.reserve, ErrorCode::kInvalidArgument,
               "{}: saved.workspace has {} bytes, the {} forward of x {} makes {}", op, saved.workspace.nbytes(),
               ops_name(ops), x.shape().str(), offset + path.reserve);
  auto* base = static_cast<unsigned char*>(saved.workspace.raw_data());
  cudnnTensorDescriptor_t xd = plan.x.get();
  cudnnActivationDescriptor_t act = ops == CUDNN_BATCHNORM_OPS_BN_ACTIVATION ? plan.relu.get() : nullptr;
  // alphaParamDiff = 1, betaParamDiff = 0: dgamma and dbeta are written, not accumulated.
  cudnnStatus_t status = cudnnBatchNormalizationBackwardEx(
      cc.cudnn(), CUDNN_BATCHNORM_SPATIAL_PERSISTENT, ops, &kOne, &kZero, &kOne, &kZero, xd, x.raw_data(), xd,
      y.raw_data(), xd, grad, nullptr, nullptr, xd, dx.raw_data(), plan.param.get(), gamma.raw_data(), base,
      dgamma.raw_data(), dbeta.raw_data(), static_cast<double>(p.eps), saved.mean.raw_data(), saved.invstd.raw_data(),
      act, ex_workspace(cc, path.backward_workspace), path.backward_workspace, base + offset, path.reserve);
  if (refused(status)) {  // the forward's saved mean and invstd serve the v7-style backward too
    decline(path, ops, op, x, "backward", status);
    return false;
  }
  TANDEM_CUDNN_CHECK(status, "op={} ({}) x={} format={} eps={}", op, ops_name(ops), x.shape().str(),
                     memory_format_name(x.format()), p.eps);
  return true;
}

// dy masked by y > 0 (y is the output after the ReLU, fused or not), in the context workspace: the
// backward calls after it use their own.
const void* relu_masked(CudaContext& cc, std::string_view op, const Tensor& y, const Tensor& dy, size_t offset) {
  auto* masked = reinterpret_cast<float*>(static_cast<char*>(cc.workspace(offset + dy.nbytes())) + offset);
  Launch l = launch_for(dy.numel());
  launch_bn_relu_mask(y.data<float>(), dy.data<float>(), masked, dy.numel(), l.blocks, l.threads, cc.stream());
  TANDEM_CUDA_LAUNCH_CHECK("bn_relu_mask_kernel", "op={} dy={} format={}", op, dy.shape().str(),
                           memory_format_name(dy.format()));
  return masked;
}

}  // namespace

void batchnorm_forward_training(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                const Tensor& beta, Tensor& running_mean, Tensor& running_var, Tensor& y,
                                BatchNormSaved& saved) {
  constexpr std::string_view op = "batchnorm_forward_training";
  CudaContext& cc = cuda_context(ctx);
  saved.workspace = Tensor();
  if (x.numel() == 0) {  // an empty batch: no statistics; cuDNN takes no zero-sized tensor
    for (Tensor* t : {&saved.mean, &saved.invstd}) {
      TANDEM_CUDA_CHECK(cudaMemsetAsync(t->raw_data(), 0, t->nbytes(), cc.stream()), "op={} x={}", op,
                        x.shape().str());
    }
    return;
  }
  if (y.dtype() == DType::kBF16 || x.dtype() == DType::kBF16) {  // cuDNN's reads and writes one type
    return batchnorm_forward_training_bf16(ctx, p, x, gamma, beta, nullptr, running_mean, running_var, y, saved);
  }
  BnPlan& plan = plan_for(cc, op, x);
  if (p.fuse_relu &&
      ex_forward(ctx, cc, plan, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, p, x, gamma, beta, running_mean, running_var, y,
                 saved)) {
    return;
  }
  if (!ex_forward(ctx, cc, plan, CUDNN_BATCHNORM_OPS_BN, p, x, gamma, beta, running_mean, running_var, y, saved)) {
    TANDEM_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
                           cc.cudnn(), training_mode(x), &kOne, &kZero, plan.x.get(), x.raw_data(), plan.x.get(),
                           y.raw_data(), plan.param.get(), gamma.raw_data(), beta.raw_data(),
                           static_cast<double>(p.momentum), running_mean.raw_data(), running_var.raw_data(),
                           static_cast<double>(p.eps), saved.mean.raw_data(), saved.invstd.raw_data()),
                       "op={} x={} format={} eps={} momentum={}", op, x.shape().str(), memory_format_name(x.format()),
                       p.eps, p.momentum);
  }
  if (p.fuse_relu) relu_in_place(cc, op, y);
}

// cuDNN's batch norm, then the residual sum and ReLU as one map over y in place (cuda_elementwise's
// add_relu): the same bits as the two ops called apart, and backward as theirs (the autograd op runs
// relu_backward, then batchnorm_backward with this plain forward's saved state). ops.cpp passes p
// without fuse_relu. With bf16 activations (a bf16 y or shortcut) it is one pass of our own.
void batchnorm_add_relu_forward_training(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                         const Tensor& beta, const Tensor& shortcut, Tensor& running_mean,
                                         Tensor& running_var, Tensor& y, BatchNormSaved& saved) {
  if (y.dtype() == DType::kBF16 || shortcut.dtype() == DType::kBF16 || x.dtype() == DType::kBF16) {
    BatchNormParams with_relu = p;
    with_relu.fuse_relu = true;  // the ReLU after the sum
    return batchnorm_forward_training_bf16(ctx, with_relu, x, gamma, beta, &shortcut, running_mean, running_var, y,
                                           saved);
  }
  batchnorm_forward_training(ctx, p, x, gamma, beta, running_mean, running_var, y, saved);
  add_relu(ctx, y, shortcut, y);
}

void batchnorm_forward_inference(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                 const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                 Tensor& y) {
  constexpr std::string_view op = "batchnorm_forward_inference";
  CudaContext& cc = cuda_context(ctx);
  if (x.numel() == 0) return;  // cuDNN takes no zero-sized tensor; y is empty too
  BnPlan& plan = plan_for(cc, op, x);
  TANDEM_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
                         cc.cudnn(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, plan.x.get(), x.raw_data(),
                         plan.x.get(), y.raw_data(), plan.param.get(), gamma.raw_data(), beta.raw_data(),
                         running_mean.raw_data(), running_var.raw_data(), static_cast<double>(p.eps)),
                     "op={} x={} format={} eps={}", op, x.shape().str(), memory_format_name(x.format()), p.eps);
  if (p.fuse_relu) relu_in_place(cc, op, y);
}

void batchnorm_backward(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                        const Tensor& gamma, const BatchNormSaved& saved, Tensor& dx, Tensor& dgamma,
                        Tensor& dbeta) {
  constexpr std::string_view op = "batchnorm_backward";
  CudaContext& cc = cuda_context(ctx);
  if (x.numel() == 0) {  // an empty batch: no gradient flows (cuDNN takes no zero-sized tensor)
    TANDEM_CUDA_CHECK(cudaMemsetAsync(dgamma.raw_data(), 0, dgamma.nbytes(), cc.stream()), "op={} dgamma", op);
    TANDEM_CUDA_CHECK(cudaMemsetAsync(dbeta.raw_data(), 0, dbeta.nbytes(), cc.stream()), "op={} dbeta", op);
    return;
  }
  if (y.dtype() == DType::kBF16 || dx.dtype() == DType::kBF16 || x.dtype() == DType::kBF16) {
    return batchnorm_backward_bf16(ctx, p, x, y, dy, gamma, saved, dx, dgamma, dbeta);
  }
  BnPlan& plan = plan_for(cc, op, x);
  const bool ex = saved.workspace.defined();  // the forward went through an Ex call
  if (ex && p.fuse_relu && plan.fused.state == ExState::kAvailable &&
      ex_backward(cc, plan, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, p, x, y, dy.raw_data(), gamma, saved, dx, dgamma,
                  dbeta)) {
    return;
  }
  // The masked gradient sits past the Ex backward's own workspace in the context's buffer.
  const size_t masked_offset = round_up(plan.plain.backward_workspace);
  const void* grad = p.fuse_relu ? relu_masked(cc, op, y, dy, masked_offset) : dy.raw_data();
  if (ex && plan.plain.state == ExState::kAvailable &&
      ex_backward(cc, plan, CUDNN_BATCHNORM_OPS_BN, p, x, y, grad, gamma, saved, dx, dgamma, dbeta)) {
    return;
  }
  // alphaParamDiff = 1, betaParamDiff = 0: dgamma and dbeta are written, not accumulated.
  TANDEM_CUDNN_CHECK(cudnnBatchNormalizationBackward(cc.cudnn(), training_mode(x), &kOne, &kZero, &kOne, &kZero,
                                                     plan.x.get(), x.raw_data(), plan.x.get(), grad, plan.x.get(),
                                                     dx.raw_data(), plan.param.get(), gamma.raw_data(),
                                                     dgamma.raw_data(), dbeta.raw_data(), static_cast<double>(p.eps),
                                                     saved.mean.raw_data(), saved.invstd.raw_data()),
                     "op={} x={} format={} eps={} fuse_relu={}", op, x.shape().str(), memory_format_name(x.format()),
                     p.eps, p.fuse_relu);
}

}  // namespace tandem::backend::cuda
