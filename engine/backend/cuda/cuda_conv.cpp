// Convolution forward and both gradients through cuDNN's legacy API (contracts in kernels.h).
// Descriptors and algorithms come from the context's ConvPlanCache (cuda_conv_plan.h).
//
// One call: the plan says which operands go through a staged copy (bf16 copies of x, w and y under
// bf16 autocast, a KRSC copy of the filter where cuDNN takes no KCRS filter beside NHWC
// activations); their sizes and the algorithm's workspace are summed and taken from the context's
// one workspace buffer with a single workspace() call, so nothing is allocated once the buffer
// has grown to the largest problem, and no staged copy can lose its buffer to a later growth.
// Everything is queued on the context's stream (the cuDNN handle is bound to it); only the first
// call of a cudnn_benchmark problem blocks, while cudnnFind*AlgorithmEx times the candidates.
// An algorithm that fails at execution (NOT_SUPPORTED, EXECUTION_FAILED) before its first success is
// dropped for the plan's next candidate, and the call is carved, staged and run again (rerun).
//
// x and dy may come in bf16 already (ops.h's bf16_operand, which rounds each once per layer under
// precision: bf16); cuDNN then reads them in place, with no staged copy. The forward's y may be bf16
// (conv2d_forward's bf16_output, for a batch norm that reads it): cuDNN writes it in place too.
//
// Bias: the forward adds it with cudnnAddTensor on our f32 y (after the bf16 result is converted
// back), the gradient sums f32 dy (a bf16 dy widened first) with cudnnConvolutionBackwardBias,
// which cuDNN does not list among its non-deterministic routines; bias values keep f32 precision.
#include <cuda_runtime_api.h>

#include "engine/backend/cuda/cuda_cast.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_conv_plan.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/core/error.h"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;
using tandem::cuda::cuda_context;

// cuDNN's scaling factors for f32 and bf16 data are floats in host memory.
constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;
constexpr size_t kAlignment = 256;  // each staged copy starts where cudaMalloc's blocks would

size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// The problem of a call; x_side is x (or dx), y_side y (or dy).
ConvProblem make_problem(ConvOp op, const Conv2dParams& p, const Tensor& x_side, const Tensor& w,
                         const Tensor& y_side, const KernelOptions& options) {
  TANDEM_CHECK(x_side.format() == y_side.format(), ErrorCode::kInvalidArgument,
               "{}: the activations {} ({}) and {} ({}) must share one memory format", conv_op_name(op),
               x_side.shape().str(), memory_format_name(x_side.format()), y_side.shape().str(),
               memory_format_name(y_side.format()));
  TANDEM_CHECK(w.format() == MemoryFormat::kContiguous, ErrorCode::kInvalidArgument,
               "{}: weights {} must be contiguous (K, C/groups, R, S), got {}", conv_op_name(op), w.shape().str(),
               memory_format_name(w.format()));
  return ConvProblem{op, x_side.shape(), w.shape(), y_side.shape(), x_side.format(), p, options};
}

FilterShape filter_shape(const Shape& w) { return {w[0], w[1], w[2], w[3]}; }

// What cuDNN reads and writes in one call, and its workspace.
struct CallBuffers {
  ConvBuffers cudnn;
  void* workspace = nullptr;
};

// Which activations of a call arrive in bf16 already (a caller's bf16_operand: ops.h): those are
// given to cuDNN as they are, neither copied nor given a staging buffer.
struct GivenBf16 {
  bool x = false, y = false;
};

bool is_bf16(const Tensor& t) { return t.dtype() == DType::kBF16; }

// Lays out the staged copies and the workspace in the context's workspace buffer; `ours` are our
// tensors' pointers, used where the plan stages nothing or the operand is bf16 already.
CallBuffers carve(CudaContext& cc, const ConvProblem& problem, const ConvPlan& plan, const ConvBuffers& ours,
                  GivenBf16 given = {}) {
  TANDEM_CHECK(plan.stages_activations() || (!given.x && !given.y), ErrorCode::kInternal,
               "{}: a bf16 operand reached a plan computing in {} ({})", conv_op_name(problem.op),
               dtype_name(plan.compute_type), problem);
  size_t element = dtype_size(plan.compute_type);
  const bool stage_x = plan.stages_activations() && !given.x, stage_y = plan.stages_activations() && !given.y;
  size_t x_bytes = stage_x ? aligned(static_cast<size_t>(problem.x.numel()) * element) : 0;
  size_t y_bytes = stage_y ? aligned(static_cast<size_t>(problem.y.numel()) * element) : 0;
  size_t w_bytes = plan.stages_filter() ? aligned(static_cast<size_t>(problem.w.numel()) * element) : 0;
  size_t total = x_bytes + y_bytes + w_bytes + plan.workspace_bytes;
  if (total == 0) return {ours, nullptr};
  char* base = static_cast<char*>(cc.workspace(total));
  CallBuffers out{ours, base + x_bytes + y_bytes + w_bytes};
  if (stage_x) out.cudnn.x = base;
  if (stage_y) out.cudnn.y = base + x_bytes;
  if (plan.stages_filter()) out.cudnn.w = base + x_bytes + y_bytes;
  return out;
}

// A bf16 operand is cuDNN's already (carve pointed at it); an f32 one is rounded into its copy.
void stage_activation(const ConvPlan& plan, const Tensor& ours, void* staged, cudaStream_t stream) {
  if (plan.stages_activations() && !is_bf16(ours)) {
    cast_f32_to_bf16(ours.data<float>(), staged, ours.numel(), stream);
  }
}

void unstage_activation(const ConvPlan& plan, const void* staged, Tensor& ours, cudaStream_t stream) {
  if (plan.stages_activations()) cast_bf16_to_f32(staged, ours.data<float>(), ours.numel(), stream);
}

void stage_filter(const ConvPlan& plan, const Tensor& w, void* staged, cudaStream_t stream) {
  if (!plan.stages_filter()) return;
  convert_filter(w.raw_data(), DType::kF32, FilterLayout::kKcrs, staged, plan.compute_type, plan.filter_layout,
                 filter_shape(w.shape()), stream);
}

void unstage_filter(const ConvPlan& plan, const void* staged, Tensor& dw, cudaStream_t stream) {
  if (!plan.stages_filter()) return;
  convert_filter(staged, plan.compute_type, plan.filter_layout, dw.raw_data(), DType::kF32, FilterLayout::kKcrs,
                 filter_shape(dw.shape()), stream);
}

void zero(Tensor& t, cudaStream_t stream, std::string_view op) {
  if (t.defined() && t.nbytes() > 0) {
    TANDEM_CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), stream), "{}: zeroing {} {}", op,
                      t.shape().str(), memory_format_name(t.format()));
  }
}

// Convolutions over nothing (a zero-sized batch, channel or filter count), which cuDNN rejects: the
// answer is zeros, plus the bias. The descriptors for the bias are made here, as this never is a
// steady state worth caching.
struct BiasDescriptors {
  TensorDescriptor bias, y;
  BiasDescriptors(const Tensor& y_tensor, std::string_view op) {
    const Shape& s = y_tensor.shape();
    cudnnTensorFormat_t format =
        y_tensor.format() == MemoryFormat::kChannelsLast ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    TANDEM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                                  static_cast<int>(s[1]), 1, 1),
                       "{}: bias of {}", op, s.str());
    TANDEM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y.get(), format, CUDNN_DATA_FLOAT, static_cast<int>(s[0]),
                                                  static_cast<int>(s[1]), static_cast<int>(s[2]),
                                                  static_cast<int>(s[3])),
                       "{}: {} {}", op, s.str(), memory_format_name(y_tensor.format()));
  }
};

void add_bias(CudaContext& cc, const TensorDescriptor& bias_desc, const Tensor& b, const TensorDescriptor& y_desc,
              Tensor& y, std::string_view what) {
  TANDEM_CUDNN_CHECK(cudnnAddTensor(cc.cudnn(), &kOne, bias_desc.get(), b.raw_data(), &kOne, y_desc.get(),
                                    y.raw_data()),
                     "{}: bias {} onto y {} {}", what, b.shape().str(), y.shape().str(),
                     memory_format_name(y.format()));
}

// dy may be a bf16 operand: its sum is taken over its f32 widening (a bias is rare beside bf16
// activations: a ResNet's convolutions have none), so db keeps f32 precision either way.
void bias_gradient(Ctx& ctx, CudaContext& cc, const TensorDescriptor& dy_desc, const Tensor& dy_in,
                   const TensorDescriptor& db_desc, Tensor& db, std::string_view what) {
  Tensor dy = dy_in;
  if (dy_in.dtype() == DType::kBF16) {
    dy = Tensor::empty(dy_in.shape(), DType::kF32, dy_in.device(), dy_in.format());
    from_bf16(ctx, dy_in, dy);
  }
  TANDEM_CUDNN_CHECK(cudnnConvolutionBackwardBias(cc.cudnn(), &kOne, dy_desc.get(), dy.raw_data(), &kZero,
                                                  db_desc.get(), db.raw_data()),
                     "{}: db {} from dy {} {}", what, db.shape().str(), dy.shape().str(),
                     memory_format_name(dy.format()));
}

// Decides on an execution's status: success keeps the algorithm for good; a status the plan falls
// back from (fall_back: the algorithm cannot run this problem, another candidate is left) asks the
// caller to carve, stage and run the call again; anything else throws, naming the algorithms tried.
bool rerun(CudaContext& cc, const ConvProblem& problem, ConvPlan& plan, cudnnStatus_t status, std::string_view call) {
  if (status == CUDNN_STATUS_SUCCESS) [[likely]] {
    plan.keep_algorithm();
    return false;
  }
  if (fall_back(cc, problem, plan, status)) return true;
  tandem::cuda::throw_cudnn_error(status, call, fmt::format("{} {}{}", problem, plan, conv_algos_dropped(plan)));
}

cudnnStatus_t run_forward(CudaContext& cc, const ConvPlan& plan, const CallBuffers& call) {
  return cudnnConvolutionForward(cc.cudnn(), &kOne, plan.x.get(), call.cudnn.x, plan.w.get(), call.cudnn.w,
                                 plan.conv.get(), static_cast<cudnnConvolutionFwdAlgo_t>(plan.algo), call.workspace,
                                 plan.workspace_bytes, &kZero, plan.y.get(), call.cudnn.y);
}

cudnnStatus_t run_backward_data(CudaContext& cc, const ConvPlan& plan, const CallBuffers& call) {
  return cudnnConvolutionBackwardData(cc.cudnn(), &kOne, plan.w.get(), call.cudnn.w, plan.y.get(), call.cudnn.y,
                                      plan.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(plan.algo),
                                      call.workspace, plan.workspace_bytes, &kZero, plan.x.get(), call.cudnn.x);
}

cudnnStatus_t run_backward_filter(CudaContext& cc, const ConvPlan& plan, const CallBuffers& call) {
  return cudnnConvolutionBackwardFilter(cc.cudnn(), &kOne, plan.x.get(), call.cudnn.x, plan.y.get(), call.cudnn.y,
                                        plan.conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan.algo),
                                        call.workspace, plan.workspace_bytes, &kZero, plan.w.get(), call.cudnn.w);
}

}  // namespace

void conv2d_forward(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  CudaContext& cc = cuda_context(ctx);
  cudaStream_t stream = cc.stream();
  if (y.numel() == 0) return;
  if (x.numel() == 0 || w.numel() == 0) {  // no input channels: y is the bias alone
    zero(y, stream, "conv2d_forward");
    if (b.defined()) {
      BiasDescriptors d(y, "conv2d_forward");
      add_bias(cc, d.bias, b, d.y, y, "conv2d_forward");
    }
    return;
  }
  ConvProblem problem = make_problem(ConvOp::kForward, p, x, w, y, cc.options());
  ConvPlan& plan = cc.state<ConvPlanCache>().get(cc, problem);
  CallBuffers call;
  do {  // once, unless the algorithm fails at execution and the plan falls back (rerun)
    call = carve(cc, problem, plan, {x.raw_data(), w.raw_data(), y.raw_data()}, {.x = is_bf16(x), .y = is_bf16(y)});
    stage_activation(plan, x, call.cudnn.x, stream);
    stage_filter(plan, w, call.cudnn.w, stream);
    if (!plan.chosen) find_algorithm(cc, problem, plan, call.cudnn, call.workspace);
  } while (rerun(cc, problem, plan, run_forward(cc, plan, call), "cudnnConvolutionForward"));
  if (is_bf16(y)) {  // cuDNN wrote our bf16 y itself (a batch norm's input): nothing to widen
    TANDEM_CHECK(!b.defined(), ErrorCode::kInternal, "conv2d_forward: a bias reached a bf16 y ({})", problem);
    return;
  }
  unstage_activation(plan, call.cudnn.y, y, stream);
  if (b.defined()) add_bias(cc, plan.bias, b, plan.y_f32, y, "conv2d_forward");
}

void conv2d_backward_data(Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w, Tensor& dx) {
  CudaContext& cc = cuda_context(ctx);
  cudaStream_t stream = cc.stream();
  if (dx.numel() == 0) return;
  if (dy.numel() == 0 || w.numel() == 0) {  // no filters: nothing flows back
    zero(dx, stream, "conv2d_backward_data");
    return;
  }
  ConvProblem problem = make_problem(ConvOp::kBackwardData, p, dx, w, dy, cc.options());
  ConvPlan& plan = cc.state<ConvPlanCache>().get(cc, problem);
  CallBuffers call;
  do {  // once, unless the algorithm fails at execution and the plan falls back (rerun)
    call = carve(cc, problem, plan, {dx.raw_data(), w.raw_data(), dy.raw_data()}, {.y = is_bf16(dy)});
    stage_activation(plan, dy, call.cudnn.y, stream);
    stage_filter(plan, w, call.cudnn.w, stream);
    if (!plan.chosen) find_algorithm(cc, problem, plan, call.cudnn, call.workspace);
  } while (rerun(cc, problem, plan, run_backward_data(cc, plan, call), "cudnnConvolutionBackwardData"));
  unstage_activation(plan, call.cudnn.x, dx, stream);
}

// cuDNN's beta = 1 would add in the same pass, but not through the bf16/TF32 staging buffers:
// a separate part and an add keep one path for every precision.
void conv2d_backward_data_add(Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w, Tensor& dx) {
  Tensor part = Tensor::empty(dx.shape(), DType::kF32, dx.device(), dx.format());
  conv2d_backward_data(ctx, p, dy, w, part);
  axpy(ctx, 1.0f, part, dx);
}

void conv2d_backward_weights(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& dy, Tensor& dw,
                             Tensor& db) {
  CudaContext& cc = cuda_context(ctx);
  cudaStream_t stream = cc.stream();
  if (x.numel() == 0 || dy.numel() == 0 || dw.numel() == 0) {  // an empty batch or no channels
    zero(dw, stream, "conv2d_backward_weights");
    if (db.defined() && dy.numel() > 0) {
      BiasDescriptors d(dy, "conv2d_backward_weights");
      bias_gradient(ctx, cc, d.y, dy, d.bias, db, "conv2d_backward_weights");
    } else {
      zero(db, stream, "conv2d_backward_weights");
    }
    return;
  }
  ConvProblem problem = make_problem(ConvOp::kBackwardWeights, p, x, dw, dy, cc.options());
  ConvPlan& plan = cc.state<ConvPlanCache>().get(cc, problem);
  CallBuffers call;
  do {  // once, unless the algorithm fails at execution and the plan falls back (rerun)
    call = carve(cc, problem, plan, {x.raw_data(), dw.raw_data(), dy.raw_data()},
                 {.x = is_bf16(x), .y = is_bf16(dy)});
    stage_activation(plan, x, call.cudnn.x, stream);
    stage_activation(plan, dy, call.cudnn.y, stream);
    if (!plan.chosen) find_algorithm(cc, problem, plan, call.cudnn, call.workspace);
  } while (rerun(cc, problem, plan, run_backward_filter(cc, plan, call), "cudnnConvolutionBackwardFilter"));
  unstage_filter(plan, call.cudnn.w, dw, stream);
  if (db.defined()) bias_gradient(ctx, cc, plan.y_f32, dy, plan.bias, db, "conv2d_backward_weights");
}

}  // namespace tandem::backend::cuda
