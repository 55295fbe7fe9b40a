// Batch normalization through cuDNN's v7-style API (deprecated in cuDNN 9, still supported):
// training with batch statistics (running averages updated in place by cuDNN, with the unbiased
// variance and exponentialAverageFactor = momentum), inference from the running statistics, and
// backward writing dgamma and dbeta (not accumulating).
//
// Mode: NHWC training and backward use CUDNN_BATCHNORM_SPATIAL_PERSISTENT, everything else
// CUDNN_BATCHNORM_SPATIAL, as PyTorch chooses. Persistent is the fast NHWC kernel and the mode
// cuDNN's fused BN+activation kernels run in; its overflow caveat (a scaled integer reduction
// with a narrower range, Inf/NaN on large finite inputs) is documented for NCHW only, which is
// why NCHW stays on plain SPATIAL. Inference uses SPATIAL: it is one elementwise pass.
//
// Fused ReLU: cuDNN fuses it only in NHWC with the persistent mode (and, as TensorFlow and NNabla
// gate it, C a multiple of 4); whether it also does so for f32 on this GPU is cuDNN's to say, so
// the first call of a shape asks (the Ex size queries, then the call itself) and a refusal sends
// that shape down the plain path for good. Fused, forward and backward go through the Ex calls
// with CUDNN_BATCHNORM_OPS_BN_ACTIVATION and saved.workspace holds [beta copy | reserve space]:
// the fused backward reads the bias, which the backward op is not given. Otherwise plain BN runs
// and a ReLU kernel clamps y; backward masks dy by y > 0 first. saved.workspace being defined is
// how the backward knows which way the forward went.
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

enum class Fusion { kUntried, kFused, kUnfused };

// Everything cuDNN needs for one shape and format, made once per context.
struct BnPlan {
  TensorDescriptor x;      // x, y, dy, dx
  TensorDescriptor param;  // (1, C, 1, 1): gamma, beta, means, variances and their gradients
  ActivationDescriptor relu;
  Fusion fusion = Fusion::kUntried;
  size_t forward_workspace = 0;
  size_t backward_workspace = 0;
  size_t reserve = 0;
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

// cuDNN's "no" to a fused call. Refusals come as NOT_SUPPORTED or, for some versions and shapes, as
// BAD_PARAM; either sends this shape down the plain path, which checks its own parameters, so a
// real mistake in a fused call costs speed (and leaves a debug log line), never values.
bool refused(cudnnStatus_t status) {
  cudnnStatus_t category = static_cast<cudnnStatus_t>(CUDNN_STATUS_CATEGORY(status));
  return category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM;
}

// Taking cuDNN's "no" to fusing this shape: the plain path gives the same values, a little slower.
void decline_fusion(BnPlan& plan, std::string_view op, const Tensor& x, std::string_view stage,
                    cudnnStatus_t status) {
  plan.fusion = Fusion::kUnfused;
  spdlog::debug("{}: cuDNN does not fuse BN+ReLU for x {} ({}: {}); running BN and ReLU separately", op,
                x.shape().str(), stage, cudnnGetErrorString(status));
}

// Whether cuDNN fuses BN + ReLU for this shape; asks it the sizes once and remembers the answer.
bool fusion_available(CudaContext& cc, BnPlan& plan, std::string_view op, const Tensor& x) {
  if (plan.fusion != Fusion::kUntried) return plan.fusion == Fusion::kFused;
  plan.fusion = Fusion::kUnfused;
  // cuDNN documents its fused NHWC BN+activation kernel for half precision, and TensorFlow and Paddle
  // use it for fp16 only: an f32 call it accepted but ran without the activation would be silently
  // wrong, so f32 (all our tensors today) takes BN and then our ReLU kernel.
  if (x.dtype() == DType::kF32) return false;
  if (x.format() != MemoryFormat::kChannelsLast || x.dim(1) % 4 != 0) return false;
  constexpr cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
  constexpr cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  cudnnHandle_t handle = cc.cudnn();
  cudnnTensorDescriptor_t xd = plan.x.get();
  cudnnStatus_t status = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      handle, mode, ops, xd, nullptr, xd, plan.param.get(), plan.relu.get(), &plan.forward_workspace);
  if (status == CUDNN_STATUS_SUCCESS) {
    status = cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, mode, ops, xd, xd, xd, nullptr, xd,
                                                               plan.param.get(), plan.relu.get(),
                                                               &plan.backward_workspace);
  }
  if (status == CUDNN_STATUS_SUCCESS) {
    status = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, ops, plan.relu.get(), xd,
                                                                  &plan.reserve);
  }
  if (refused(status)) {
    decline_fusion(plan, op, x, "size query", status);
    return false;
  }
  TANDEM_CUDNN_CHECK(status, "op={} (fused BN+ReLU sizes) x={} format={}", op, x.shape().str(),
                     memory_format_name(x.format()));
  plan.fusion = Fusion::kFused;
  return true;
}

// A workspace pointer that is never null: cuDNN documents that the Ex call with a null workspace of
// size 0 acts as the plain call, and the plain call has no activation to apply.
void* ex_workspace(CudaContext& cc, size_t bytes) { return cc.workspace(bytes > 0 ? bytes : kAlign); }

// Training forward with cuDNN's fused ReLU; false (having changed nothing the caller sees) when
// cuDNN does not fuse this shape.
bool fused_forward(Ctx& ctx, CudaContext& cc, BnPlan& plan, const BatchNormParams& p, const Tensor& x,
                   const Tensor& gamma, const Tensor& beta, Tensor& running_mean, Tensor& running_var, Tensor& y,
                   BatchNormSaved& saved) {
  constexpr std::string_view op = "batchnorm_forward_training";
  if (!fusion_available(cc, plan, op, x)) return false;
  size_t beta_bytes = beta.nbytes();
  size_t offset = round_up(beta_bytes);
  Tensor workspace = Tensor::empty({static_cast<int64_t>(offset + plan.reserve)}, DType::kU8, ctx.device());
  auto* base = static_cast<unsigned char*>(workspace.raw_data());
  cudnnTensorDescriptor_t xd = plan.x.get();
  cudnnStatus_t status = cudnnBatchNormalizationForwardTrainingEx(
      cc.cudnn(), CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, &kOne, &kZero, xd,
      x.raw_data(), nullptr, nullptr, xd, y.raw_data(), plan.param.get(), gamma.raw_data(), beta.raw_data(),
      static_cast<double>(p.momentum), running_mean.raw_data(), running_var.raw_data(), static_cast<double>(p.eps),
      saved.mean.raw_data(), saved.invstd.raw_data(), plan.relu.get(), ex_workspace(cc, plan.forward_workspace),
      plan.forward_workspace, base + offset, plan.reserve);
  if (refused(status)) {  // refused before any work was queued: take the unfused path from now on
    decline_fusion(plan, op, x, "forward", status);
    return false;
  }
  TANDEM_CUDNN_CHECK(status, "op={} (fused ReLU) x={} format={} eps={} momentum={}", op, x.shape().str(),
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

// Backward through cuDNN's fused ReLU; false when cuDNN refuses it (the caller then masks dy).
bool fused_backward(CudaContext& cc, BnPlan& plan, const BatchNormParams& p, const Tensor& x, const Tensor& y,
                    const Tensor& dy, const Tensor& gamma, const BatchNormSaved& saved, Tensor& dx, Tensor& dgamma,
                    Tensor& dbeta) {
  constexpr std::string_view op = "batchnorm_backward";
  if (!fusion_available(cc, plan, op, x)) return false;
  size_t offset = round_up(gamma.nbytes());
  TANDEM_CHECK(saved.workspace.nbytes() == offset + plan.reserve, ErrorCode::kInvalidArgument,
               "{}: saved.workspace has {} bytes, the fused forward of x {} makes {}", op, saved.workspace.nbytes(),
               x.shape().str(), offset + plan.reserve);
  auto* base = static_cast<unsigned char*>(saved.workspace.raw_data());
  cudnnTensorDescriptor_t xd = plan.x.get();
  cudnnStatus_t status = cudnnBatchNormalizationBackwardEx(
      cc.cudnn(), CUDNN_BATCHNORM_SPATIAL_PERSISTENT, CUDNN_BATCHNORM_OPS_BN_ACTIVATION, &kOne, &kZero, &kOne, &kZero,
      xd, x.raw_data(), xd, y.raw_data(), xd, dy.raw_data(), nullptr, nullptr, xd, dx.raw_data(), plan.param.get(),
      gamma.raw_data(), base, dgamma.raw_data(), dbeta.raw_data(), static_cast<double>(p.eps), saved.mean.raw_data(),
      saved.invstd.raw_data(), plan.relu.get(), ex_workspace(cc, plan.backward_workspace), plan.backward_workspace,
      base + offset, plan.reserve);
  if (refused(status)) {  // a fused forward is useless without its backward: stop fusing
    decline_fusion(plan, op, x, "backward", status);
    return false;
  }
  TANDEM_CUDNN_CHECK(status, "op={} (fused ReLU) x={} format={} eps={}", op, x.shape().str(),
                     memory_format_name(x.format()), p.eps);
  return true;
}

}  // namespace

void batchnorm_forward_training(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                const Tensor& beta, Tensor& running_mean, Tensor& running_var, Tensor& y,
                                BatchNormSaved& saved) {
  constexpr std::string_view op = "batchnorm_forward_training";
  CudaContext& cc = cuda_context(ctx);
  BnPlan& plan = plan_for(cc, op, x);
  saved.workspace = Tensor();
  if (p.fuse_relu && fused_forward(ctx, cc, plan, p, x, gamma, beta, running_mean, running_var, y, saved)) return;
  // resultSaveMean / resultSaveInvVariance are the batch mean and 1 / sqrt(biased variance + eps):
  // exactly saved.mean and saved.invstd.
  TANDEM_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
                         cc.cudnn(), training_mode(x), &kOne, &kZero, plan.x.get(), x.raw_data(), plan.x.get(),
                         y.raw_data(), plan.param.get(), gamma.raw_data(), beta.raw_data(),
                         static_cast<double>(p.momentum), running_mean.raw_data(), running_var.raw_data(),
                         static_cast<double>(p.eps), saved.mean.raw_data(), saved.invstd.raw_data()),
                     "op={} x={} format={} eps={} momentum={}", op, x.shape().str(), memory_format_name(x.format()),
                     p.eps, p.momentum);
  if (p.fuse_relu) relu_in_place(cc, op, y);
}

// cuDNN's batch norm, then the residual sum and ReLU as one map over y in place (cuda_elementwise's
// add_relu): the same bits as the two ops called apart, and backward as theirs (the autograd op runs
// relu_backward, then batchnorm_backward with this plain forward's saved state). ops.cpp passes p
// without fuse_relu.
void batchnorm_add_relu_forward_training(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                         const Tensor& beta, const Tensor& shortcut, Tensor& running_mean,
                                         Tensor& running_var, Tensor& y, BatchNormSaved& saved) {
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
  BnPlan& plan = plan_for(cc, op, x);
  bool fused = p.fuse_relu && saved.workspace.defined();
  if (fused && fused_backward(cc, plan, p, x, y, dy, gamma, saved, dx, dgamma, dbeta)) return;
  const void* grad = dy.raw_data();
  if (p.fuse_relu) {
    // y is the output after the ReLU (fused or not), so y > 0 is the ReLU's mask. The masked
    // gradient lives in the context workspace: the plain backward below uses none of its own.
    auto* masked = static_cast<float*>(cc.workspace(dy.nbytes()));
    Launch l = launch_for(dy.numel());
    launch_bn_relu_mask(y.data<float>(), dy.data<float>(), masked, dy.numel(), l.blocks, l.threads, cc.stream());
    TANDEM_CUDA_LAUNCH_CHECK("bn_relu_mask_kernel", "op={} dy={} format={}", op, dy.shape().str(),
                             memory_format_name(dy.format()));
    grad = masked;
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
