// The cuDNN side of the convolution kernels (cuda_conv.cpp): the descriptors of one convolution
// problem and the algorithm chosen for it, cached per context (CudaContext::state) so that a step
// after the first creates no descriptor and asks cuDNN nothing.
//
// Choice of algorithm, per problem (op, shapes, memory format, parameters, precision, determinism):
// - default: cudnnGet*Algorithm_v7 heuristics, in their order of expected speed, keeping the first
//   candidate that succeeded, needs at most kMaxConvWorkspaceBytes of workspace, is deterministic
//   when KernelOptions::deterministic asks for it, and whose math type the precision allows;
// - cudnn_benchmark: the first call of a problem times the same candidates with
//   cudnnFind*AlgorithmEx on the call's real buffers (synchronous, once per problem), with a
//   workspace as large as the largest of the heuristics' usable candidates, same filters.
//
// Math: fp32 runs every algorithm with CUDNN_FMA_MATH (never TF32, whatever math type the search
// reports with a candidate; those reported with FMA are preferred), tf32 and bf16 run a candidate
// with the math type the search reported it with (cuDNN's advice), never ALLOW_CONVERSION.
//
// Filters: our weights are KCRS. Beside NHWC activations cuDNN gets an NHWC (KRSC) filter, which
// the kernel stages as a converted copy each call: its NHWC tensor-core kernels want that layout, and
// with a KCRS filter it offers only slow mixed-layout ones. When no algorithm can run with KRSC (the
// heuristics offer none, or every one fails at execution), the plan tries KCRS, once.
#pragma once

#include <cudnn.h>
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/backend/cuda/cuda_cast.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cudnn_descriptors.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/kernels.h"

namespace tandem::backend::cuda {

// The heuristics' candidates needing more workspace than this are passed over (a sane cap: the
// workspace is grow-only and shared by every kernel of the context).
inline constexpr size_t kMaxConvWorkspaceBytes = size_t{1} << 30;

enum class ConvOp : uint8_t { kForward, kBackwardData, kBackwardWeights };
std::string_view conv_op_name(ConvOp op);  // "conv2d_forward", ...

// One convolution as cuDNN sees it, whatever the op: x (N, C, H, W) is the forward input (dx of the
// data gradient), y (N, K, P, Q) the forward output (dy of both gradients), w (K, C/groups, R, S).
struct ConvProblem {
  ConvOp op = ConvOp::kForward;
  Shape x, w, y;
  MemoryFormat format = MemoryFormat::kContiguous;  // of x and y
  Conv2dParams params;
  KernelOptions options;
};

// One algorithm as the heuristics or a timing run report it, whatever the op.
struct ConvCandidate {
  int algo = 0;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  size_t memory = 0;
  cudnnDeterminism_t determinism = CUDNN_NON_DETERMINISTIC;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  float time_ms = 0.0f;  // timing runs only
};

struct ConvPlan {
  ConvOp op = ConvOp::kForward;
  TensorDescriptor x, y;   // in compute_type: what the convolution reads and writes
  TensorDescriptor y_f32;  // y as our f32 tensor: the bias add and the bias gradient use it
  TensorDescriptor bias;   // (1, K, 1, 1) f32
  FilterDescriptor w;      // in compute_type and filter_layout
  ConvolutionDescriptor conv;
  DType compute_type = DType::kF32;  // bf16 under bf16 autocast: x, w and y go through bf16 copies
  FilterLayout filter_layout = FilterLayout::kKcrs;
  bool chosen = false;  // false until a cudnn_benchmark problem's first call has timed the candidates
  int algo = 0;         // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, per op
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace_bytes = 0;  // of the chosen algorithm; while !chosen, the budget of the timing run
  // Until the chosen algorithm has run once: the usable candidates after it, in the search's order,
  // to fall back on when it fails at execution (fall_back). Emptied by the first success.
  std::vector<ConvCandidate> fallbacks;
  // (algorithm, math type) of the runs that failed at execution, in the order tried.
  std::vector<std::pair<int, cudnnMathType_t>> dropped;
  bool switched_filter_layout = false;  // the preferred layout had nothing that ran: the other one
  size_t dropped_before_switch = 0;     // dropped's entries of the first layout

  // After a successful execution: the algorithm stays for good (no allocation in the steady state).
  void keep_algorithm() {
    if (!fallbacks.empty()) fallbacks = {};
  }

  bool stages_activations() const { return compute_type != DType::kF32; }
  bool stages_filter() const { return compute_type != DType::kF32 || filter_layout != FilterLayout::kKcrs; }
};

// The buffers of one call as cuDNN reads and writes them: our tensors or their staged copies.
struct ConvBuffers {
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
};

// Plans per problem, one cache per context.
class ConvPlanCache {
 public:
  // The plan of the problem, created on its first use (descriptors and, unless cudnn_benchmark,
  // the algorithm).
  ConvPlan& get(tandem::cuda::CudaContext& cc, const ConvProblem& problem);

 private:
  using Key = std::array<int64_t, 24>;
  static Key key_of(const ConvProblem& problem);
  std::map<Key, std::unique_ptr<ConvPlan>> plans_;
};

// cudnn_benchmark: times the candidates on the call's buffers with workspace (plan.workspace_bytes of
// it) and fixes the plan's algorithm. Blocks the host until the timing runs are done.
void find_algorithm(tandem::cuda::CudaContext& cc, const ConvProblem& problem, ConvPlan& plan,
                    const ConvBuffers& buffers, void* workspace);

// After the execution of the plan's algorithm returned status (not success): whether status says
// that this algorithm cannot run this problem (NOT_SUPPORTED or EXECUTION_FAILED, with their
// sub-codes) and the plan now holds the next usable candidate (algo, math type and workspace_bytes
// reset: the caller lays out its workspace and staged copies again and reruns the call). Warns once
// per algorithm dropped. False: the caller throws, naming conv_algos_dropped(plan).
bool fall_back(tandem::cuda::CudaContext& cc, const ConvProblem& problem, ConvPlan& plan, cudnnStatus_t status);

// "" if nothing was dropped, else "; dropped after failing at execution: FFT (math FMA), GEMM (math FMA)".
std::string conv_algos_dropped(const ConvPlan& plan);

// "KRSC" or "KCRS".
std::string_view filter_layout_name(FilterLayout layout);

// "IMPLICIT_PRECOMP_GEMM", "ALGO_1", ... for the op's algorithm enum.
std::string_view conv_algo_name(ConvOp op, int algo);

}  // namespace tandem::backend::cuda

// Error messages name the problem ("conv2d_forward x=[...] w=[...] y=[...] format=... stride=...")
// and the plan ("algo=... math=... workspace=... bytes"); formatted only when a check fails.
template <>
struct fmt::formatter<tandem::backend::cuda::ConvProblem> : fmt::formatter<std::string_view> {
  fmt::format_context::iterator format(const tandem::backend::cuda::ConvProblem& p, fmt::format_context& ctx) const;
};

template <>
struct fmt::formatter<tandem::backend::cuda::ConvPlan> : fmt::formatter<std::string_view> {
  fmt::format_context::iterator format(const tandem::backend::cuda::ConvPlan& p, fmt::format_context& ctx) const;
};
