// Descriptors and algorithm choice of the cuDNN convolutions; see cuda_conv_plan.h for the policy.
#include "engine/backend/cuda/cuda_conv_plan.h"

#include <algorithm>
#include <climits>
#include <iterator>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "engine/core/error.h"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;

using Candidate = ConvCandidate;

template <typename Perf>
std::vector<Candidate> to_candidates(const std::vector<Perf>& perf, int returned) {
  std::vector<Candidate> out;
  size_t n = std::min(perf.size(), static_cast<size_t>(std::max(returned, 0)));
  for (size_t i = 0; i < n; ++i) {
    const Perf& p = perf[i];
    out.push_back({static_cast<int>(p.algo), p.status, p.memory, p.determinism, p.mathType, p.time});
  }
  return out;
}

cudnnDataType_t cudnn_type(DType type) { return type == DType::kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }

cudnnTensorFormat_t cudnn_format(MemoryFormat format) {
  return format == MemoryFormat::kChannelsLast ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

// The math type the descriptor carries into the heuristics and timing runs. fp32: FMA kernels only,
// so results are plain f32 like the CPU backend's (CUDNN_DEFAULT_MATH lets Ampere and later use TF32
// tensor cores on f32 data). tf32: default math, TF32 tensor cores allowed. bf16: tensor ops on the
// bf16 copies, accumulating in f32 (the descriptor's compute type).
cudnnMathType_t requested_math(Precision precision) {
  switch (precision) {
    case Precision::kF32: return CUDNN_FMA_MATH;
    case Precision::kTf32: return CUDNN_DEFAULT_MATH;
    case Precision::kBf16: return CUDNN_TENSOR_OP_MATH;
  }
  return CUDNN_FMA_MATH;
}

// Whether a candidate may run under the precision. ALLOW_CONVERSION may down-convert the operands
// (to fp16), which no precision of ours allows; under fp32 any candidate is fine because the plan
// runs it with FMA math whatever math type the search reported (applied_math).
bool math_allowed(Precision precision, cudnnMathType_t math) {
  return precision == Precision::kF32 || math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// The math type the descriptor carries when the candidate runs. cuDNN wants the one the search
// reported with the algorithm (the search may mix math types whatever the descriptor said), except
// under fp32, where tensor cores (TF32) are never allowed: the descriptor stays at FMA.
cudnnMathType_t applied_math(Precision precision, const Candidate& c) {
  return precision == Precision::kF32 ? CUDNN_FMA_MATH : c.math;
}

// Under fp32, candidates the search reported with FMA math come first (their workspace and speed
// were measured as they will run); otherwise cuDNN's order (expected or measured speed) stands.
void order(std::vector<Candidate>& candidates, const ConvProblem& problem) {
  if (problem.options.precision != Precision::kF32) return;
  std::stable_partition(candidates.begin(), candidates.end(),
                        [](const Candidate& c) { return c.math == CUDNN_FMA_MATH; });
}

std::string_view math_name(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_DEFAULT_MATH: return "DEFAULT";
    case CUDNN_TENSOR_OP_MATH: return "TENSOR_OP";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "TENSOR_OP_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "FMA";
  }
  return "?";
}

bool usable(const Candidate& c, const ConvProblem& problem, size_t limit) {
  return c.status == CUDNN_STATUS_SUCCESS && c.memory <= limit &&
         (!problem.options.deterministic || c.determinism == CUDNN_DETERMINISTIC) &&
         math_allowed(problem.options.precision, c.math);
}

bool any_usable(const std::vector<Candidate>& candidates, const ConvProblem& problem) {
  return std::any_of(candidates.begin(), candidates.end(),
                     [&](const Candidate& c) { return usable(c, problem, kMaxConvWorkspaceBytes); });
}

// For error messages: every candidate with why it may have been passed over.
std::string describe(ConvOp op, const std::vector<Candidate>& candidates) {
  if (candidates.empty()) return "none";
  std::string out;
  for (const Candidate& c : candidates) {
    if (!out.empty()) out += "; ";
    out += fmt::format("{} (status {}, workspace {} bytes, {}, math {}{})", conv_algo_name(op, c.algo),
                       cudnnGetErrorString(c.status), c.memory,
                       c.determinism == CUDNN_DETERMINISTIC ? "deterministic" : "non-deterministic",
                       math_name(c.math), c.time_ms > 0.0f ? fmt::format(", {} ms", c.time_ms) : "");
  }
  return out;
}

int as_int(int64_t v, const ConvProblem& problem) {
  TANDEM_CHECK(v >= 0 && v <= INT_MAX, ErrorCode::kInvalidArgument,
               "{}: size {} does not fit cuDNN's int dimensions", problem, v);
  return static_cast<int>(v);
}

void set_tensor(const TensorDescriptor& d, const Shape& s, MemoryFormat format, DType type,
                const ConvProblem& problem) {
  TANDEM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.get(), cudnn_format(format), cudnn_type(type), as_int(s[0], problem),
                                                as_int(s[1], problem), as_int(s[2], problem), as_int(s[3], problem)),
                     "{} tensor={} {} {}", problem, s.str(), memory_format_name(format), dtype_name(type));
}

void set_filter(ConvPlan& plan, const ConvProblem& problem, FilterLayout layout) {
  plan.filter_layout = layout;
  const Shape& w = problem.w;
  cudnnTensorFormat_t format = layout == FilterLayout::kKrsc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  TANDEM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan.w.get(), cudnn_type(plan.compute_type), format,
                                                as_int(w[0], problem), as_int(w[1], problem), as_int(w[2], problem),
                                                as_int(w[3], problem)),
                     "{} filter layout {}", problem, layout == FilterLayout::kKrsc ? "KRSC" : "KCRS");
}

// Cross-correlation (no kernel flip), as PyTorch and oneDNN define convolution; f32 accumulation
// for bf16 data too (cuDNN's pseudo-bf16 configuration).
void set_convolution(const ConvPlan& plan, const ConvProblem& problem) {
  const Conv2dParams& p = problem.params;
  TANDEM_CUDNN_CHECK(
      cudnnSetConvolution2dDescriptor(plan.conv.get(), as_int(p.padding[0], problem), as_int(p.padding[1], problem),
                                      as_int(p.stride[0], problem), as_int(p.stride[1], problem),
                                      as_int(p.dilation[0], problem), as_int(p.dilation[1], problem),
                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
      "{}", problem);
  TANDEM_CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan.conv.get(), as_int(p.groups, problem)), "{}", problem);
  TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), requested_math(problem.options.precision)), "{}",
                     problem);
}

std::vector<Candidate> heuristic_candidates(cudnnHandle_t h, const ConvProblem& problem, const ConvPlan& p) {
  int max_count = 0, returned = 0;
  switch (problem.op) {
    case ConvOp::kForward: {
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count), "{}", problem);
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x.get(), p.w.get(), p.conv.get(), p.y.get(),
                                                                static_cast<int>(perf.size()), &returned, perf.data()),
                         "{}", problem);
      return to_candidates(perf, returned);
    }
    case ConvOp::kBackwardData: {
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count), "{}", problem);
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w.get(), p.y.get(), p.conv.get(), p.x.get(),
                                                                     static_cast<int>(perf.size()), &returned,
                                                                     perf.data()),
                         "{}", problem);
      return to_candidates(perf, returned);
    }
    case ConvOp::kBackwardWeights: {
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count), "{}", problem);
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x.get(), p.y.get(), p.conv.get(),
                                                                       p.w.get(), static_cast<int>(perf.size()),
                                                                       &returned, perf.data()),
                         "{}", problem);
      return to_candidates(perf, returned);
    }
  }
  return {};
}

// Runs every algorithm on the real buffers (outputs are overwritten; the caller runs the chosen one
// after). The Ex variants use our workspace instead of allocating their own.
std::vector<Candidate> timed_candidates(cudnnHandle_t h, const ConvProblem& problem, const ConvPlan& p,
                                        const ConvBuffers& b, void* ws, size_t ws_bytes) {
  int max_count = 0, returned = 0;
  switch (problem.op) {
    case ConvOp::kForward: {
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count), "{}", problem);
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      TANDEM_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, p.x.get(), b.x, p.w.get(), b.w, p.conv.get(),
                                                                p.y.get(), b.y, static_cast<int>(perf.size()),
                                                                &returned, perf.data(), ws, ws_bytes),
                         "{} workspace={} bytes", problem, ws_bytes);
      return to_candidates(perf, returned);
    }
    case ConvOp::kBackwardData: {
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count), "{}", problem);
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      TANDEM_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, p.w.get(), b.w, p.y.get(), b.y, p.conv.get(),
                                                                     p.x.get(), b.x, static_cast<int>(perf.size()),
                                                                     &returned, perf.data(), ws, ws_bytes),
                         "{} workspace={} bytes", problem, ws_bytes);
      return to_candidates(perf, returned);
    }
    case ConvOp::kBackwardWeights: {
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count), "{}", problem);
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(std::max(max_count, 1)));
      TANDEM_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p.x.get(), b.x, p.y.get(), b.y,
                                                                       p.conv.get(), p.w.get(), b.w,
                                                                       static_cast<int>(perf.size()), &returned,
                                                                       perf.data(), ws, ws_bytes),
                         "{} workspace={} bytes", problem, ws_bytes);
      return to_candidates(perf, returned);
    }
  }
  return {};
}

// cuDNN's workspace size for algo with the descriptors as they are now (math type included).
cudnnStatus_t workspace_size(cudnnHandle_t h, const ConvPlan& p, int algo, size_t* bytes) {
  switch (p.op) {
    case ConvOp::kForward:
      return cudnnGetConvolutionForwardWorkspaceSize(h, p.x.get(), p.w.get(), p.conv.get(), p.y.get(),
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
    case ConvOp::kBackwardData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w.get(), p.y.get(), p.conv.get(), p.x.get(),
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case ConvOp::kBackwardWeights:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x.get(), p.y.get(), p.conv.get(), p.w.get(),
                                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

// Makes c the plan's algorithm if its workspace (asked again with the math type it will run with on
// the descriptor) fits limit.
bool try_apply(cudnnHandle_t h, const ConvProblem& problem, ConvPlan& plan, const Candidate& c, size_t limit) {
  cudnnMathType_t math = applied_math(problem.options.precision, c);
  TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), math), "{} math {}", problem, math_name(math));
  size_t bytes = 0;
  if (workspace_size(h, plan, c.algo, &bytes) != CUDNN_STATUS_SUCCESS) return false;
  bytes = std::max(bytes, c.memory);
  if (bytes > limit) return false;
  plan.algo = c.algo;
  plan.math = math;
  plan.workspace_bytes = bytes;
  plan.chosen = true;
  return true;
}

// Makes the first usable candidate that try_apply accepts the plan's algorithm and keeps the usable
// ones after it as the plan's fallbacks, in order.
bool apply_first(cudnnHandle_t h, const ConvProblem& problem, ConvPlan& plan, const std::vector<Candidate>& candidates,
                 size_t limit) {
  for (auto it = candidates.begin(); it != candidates.end(); ++it) {
    if (!usable(*it, problem, limit) || !try_apply(h, problem, plan, *it, limit)) continue;
    plan.fallbacks.clear();
    std::copy_if(std::next(it), candidates.end(), std::back_inserter(plan.fallbacks),
                 [&](const Candidate& c) { return usable(c, problem, limit); });
    return true;
  }
  return false;
}

// The statuses by which an execution says that this algorithm cannot run this problem, where another
// may: NOT_SUPPORTED (the configuration is outside what the algorithm's kernels handle, found when
// cuDNN validates the call, before any work is queued) and EXECUTION_FAILED (one of its kernels
// failed to launch, e.g. asking for more shared memory or registers than the device has). BAD_PARAM
// is not one: it reports arguments (descriptors, pointers) that are wrong for every algorithm.
bool algorithm_cannot_run(cudnnStatus_t status) {
  int category = CUDNN_STATUS_CATEGORY(static_cast<int>(status));
  return category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_EXECUTION_FAILED;
}

// The workspace of a timing run: enough for the largest usable candidate of the heuristics.
size_t timing_budget(cudnnHandle_t h, const ConvProblem& problem, const ConvPlan& plan,
                     const std::vector<Candidate>& candidates) {
  size_t budget = 0;
  for (const Candidate& c : candidates) {
    size_t bytes = 0;
    if (!usable(c, problem, kMaxConvWorkspaceBytes)) continue;
    if (workspace_size(h, plan, c.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    bytes = std::max(bytes, c.memory);
    if (bytes <= kMaxConvWorkspaceBytes) budget = std::max(budget, bytes);
  }
  return budget;
}

// NHWC activations take an NHWC (KRSC) filter: the tensor-core NHWC kernels of Volta and later want
// it, and beside a KCRS filter cuDNN offers only mixed-layout kernels (ResNet-50 training on an H200
// ran 5 to 14 times slower than PyTorch that way, 2026-12-04). Our weights stay KCRS: the call stages
// a KRSC copy, one pass over the weights, small beside the activations.
FilterLayout preferred_filter_layout(MemoryFormat format) {
  return format == MemoryFormat::kChannelsLast ? FilterLayout::kKrsc : FilterLayout::kKcrs;
}

FilterLayout other_layout(FilterLayout layout) {
  return layout == FilterLayout::kKrsc ? FilterLayout::kKcrs : FilterLayout::kKrsc;
}

[[noreturn]] void throw_no_algorithm(const ConvProblem& problem, std::string_view source, size_t limit,
                                     const std::string& candidates) {
  throw_error(ErrorCode::kUnimplemented,
              "{}: {} offered no usable algorithm (wanted: status success, workspace at most {} bytes{}{}); "
              "candidates: {}",
              problem, source, limit, problem.options.deterministic ? ", deterministic" : "",
              problem.options.precision == Precision::kF32 ? "" : ", no TENSOR_OP_ALLOW_CONVERSION math",
              candidates);
}

std::unique_ptr<ConvPlan> create_plan(CudaContext& cc, const ConvProblem& problem) {
  auto plan = std::make_unique<ConvPlan>();
  plan->op = problem.op;
  plan->compute_type = problem.options.precision == Precision::kBf16 ? DType::kBF16 : DType::kF32;
  set_tensor(plan->x, problem.x, problem.format, plan->compute_type, problem);
  set_tensor(plan->y, problem.y, problem.format, plan->compute_type, problem);
  set_tensor(plan->y_f32, problem.y, problem.format, DType::kF32, problem);
  set_tensor(plan->bias, Shape{1, problem.w[0], 1, 1}, MemoryFormat::kContiguous, DType::kF32, problem);
  set_convolution(*plan, problem);
  const FilterLayout first = preferred_filter_layout(problem.format);
  set_filter(*plan, problem, first);
  cudnnHandle_t h = cc.cudnn();
  std::vector<Candidate> candidates = heuristic_candidates(h, problem, *plan);
  order(candidates, problem);
  std::string report = fmt::format("{} filter: {}", filter_layout_name(first), describe(problem.op, candidates));
  if (!any_usable(candidates, problem) && problem.format == MemoryFormat::kChannelsLast) {
    set_filter(*plan, problem, other_layout(first));
    plan->switched_filter_layout = true;
    candidates = heuristic_candidates(h, problem, *plan);
    order(candidates, problem);
    report += fmt::format(" | {} filter: {}", filter_layout_name(plan->filter_layout), describe(problem.op, candidates));
  }
  if (problem.options.cudnn_benchmark) {
    plan->workspace_bytes = timing_budget(h, problem, *plan, candidates);
    if (any_usable(candidates, problem)) return plan;
  } else if (apply_first(h, problem, *plan, candidates, kMaxConvWorkspaceBytes)) {
    spdlog::debug("{}: {} (heuristics)", problem, *plan);
    return plan;
  }
  throw_no_algorithm(problem, "cuDNN's heuristics (cudnnGet*Algorithm_v7)", kMaxConvWorkspaceBytes, report);
}

}  // namespace

bool fall_back(CudaContext& cc, const ConvProblem& problem, ConvPlan& plan, cudnnStatus_t status) {
  if (!algorithm_cannot_run(status)) return false;
  // A fault left by an earlier kernel fails this call too: it is not this algorithm's, and dropping
  // good algorithms for it would hide it. Name it as what it is.
  tandem::cuda::check_no_earlier_fault(
      cudaStreamQuery(cc.stream()),
      fmt::format("{} fell back from algorithm {} ({})", problem, conv_algo_name(problem.op, plan.algo),
                  cudnnGetErrorString(status)));
  // A kernel that failed to launch leaves its (non-sticky) error in the runtime, where the next
  // launch check would find it; a sticky error stays and fails the next call anyway.
  if (CUDNN_STATUS_CATEGORY(static_cast<int>(status)) == CUDNN_STATUS_EXECUTION_FAILED) (void)cudaGetLastError();
  plan.dropped.emplace_back(plan.algo, plan.math);
  std::string_view failed = conv_algo_name(problem.op, plan.algo);
  cudnnHandle_t h = cc.cudnn();
  while (!plan.fallbacks.empty()) {
    Candidate next = plan.fallbacks.front();
    plan.fallbacks.erase(plan.fallbacks.begin());
    // The search may list an algorithm once per math type; one that would run as a dropped run did
    // (same algorithm, same applied math) would fail the same way.
    std::pair<int, cudnnMathType_t> run{next.algo, applied_math(problem.options.precision, next)};
    auto same_layout = plan.dropped.begin() + static_cast<std::ptrdiff_t>(plan.dropped_before_switch);
    if (std::find(same_layout, plan.dropped.end(), run) != plan.dropped.end()) continue;
    if (!try_apply(h, problem, plan, next, kMaxConvWorkspaceBytes)) continue;
    spdlog::warn("{}: algorithm {} failed at execution ({}); dropped for good, trying {}", problem, failed,
                 cudnnGetErrorString(status), fmt::format("{}", plan));
    return true;
  }
  // Every candidate of this filter layout failed: NHWC activations can still run with the other one.
  if (problem.format != MemoryFormat::kChannelsLast || plan.switched_filter_layout) return false;
  const FilterLayout was = plan.filter_layout;
  set_filter(plan, problem, other_layout(was));
  plan.switched_filter_layout = true;
  plan.dropped_before_switch = plan.dropped.size();
  std::vector<Candidate> candidates = heuristic_candidates(h, problem, plan);
  order(candidates, problem);
  if (!apply_first(h, problem, plan, candidates, kMaxConvWorkspaceBytes)) return false;
  spdlog::warn("{}: every algorithm failed at execution with a {} filter (last: {}, {}); trying a {} filter: {}",
               problem, filter_layout_name(was), failed, cudnnGetErrorString(status),
               filter_layout_name(plan.filter_layout), fmt::format("{}", plan));
  return true;
}

std::string_view filter_layout_name(FilterLayout layout) { return layout == FilterLayout::kKrsc ? "KRSC" : "KCRS"; }

std::string conv_algos_dropped(const ConvPlan& plan) {
  if (plan.dropped.empty()) return "";
  std::string out = "; dropped after failing at execution:";
  for (size_t i = 0; i < plan.dropped.size(); ++i) {
    const auto& [algo, math] = plan.dropped[i];
    out += fmt::format("{} {} (math {})", i == 0 ? "" : ",", conv_algo_name(plan.op, algo), math_name(math));
  }
  return out;
}

std::string_view conv_op_name(ConvOp op) {
  switch (op) {
    case ConvOp::kForward: return "conv2d_forward";
    case ConvOp::kBackwardData: return "conv2d_backward_data";
    case ConvOp::kBackwardWeights: return "conv2d_backward_weights";
  }
  return "conv2d";
}

std::string_view conv_algo_name(ConvOp op, int algo) {
  static constexpr std::string_view kForward[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                                  "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static constexpr std::string_view kData[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD",
                                               "WINOGRAD_NONFUSED"};
  static constexpr std::string_view kFilter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD",
                                                 "WINOGRAD_NONFUSED", "FFT_TILING"};
  auto pick = [algo](const auto& names) -> std::string_view {
    return algo >= 0 && static_cast<size_t>(algo) < std::size(names) ? names[algo] : "UNKNOWN";
  };
  switch (op) {
    case ConvOp::kForward: return pick(kForward);
    case ConvOp::kBackwardData: return pick(kData);
    case ConvOp::kBackwardWeights: return pick(kFilter);
  }
  return "UNKNOWN";
}

ConvPlanCache::Key ConvPlanCache::key_of(const ConvProblem& problem) {
  Key key{};
  size_t i = 0;
  auto put = [&](int64_t v) { key[i++] = v; };
  put(static_cast<int64_t>(problem.op));
  for (const Shape* s : {&problem.x, &problem.w, &problem.y}) {
    for (int d = 0; d < 4; ++d) put((*s)[d]);
  }
  const Conv2dParams& p = problem.params;
  for (int64_t v : {p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1], p.groups}) {
    put(v);
  }
  put(static_cast<int64_t>(problem.format));
  put(static_cast<int64_t>(problem.options.precision));
  put(problem.options.deterministic ? 1 : 0);
  put(problem.options.cudnn_benchmark ? 1 : 0);
  return key;
}

ConvPlan& ConvPlanCache::get(CudaContext& cc, const ConvProblem& problem) {
  Key key = key_of(problem);
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  std::unique_ptr<ConvPlan> plan = create_plan(cc, problem);
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void find_algorithm(CudaContext& cc, const ConvProblem& problem, ConvPlan& plan, const ConvBuffers& buffers,
                    void* workspace) {
  cudnnHandle_t h = cc.cudnn();
  // The timing run searches among the precision's kernels; try_apply then sets the winner's math type.
  TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv.get(), requested_math(problem.options.precision)), "{}",
                     problem);
  size_t budget = plan.workspace_bytes;
  std::vector<Candidate> timed = timed_candidates(h, problem, plan, buffers, workspace, budget);
  order(timed, problem);
  if (apply_first(h, problem, plan, timed, budget)) {
    spdlog::debug("{}: {} (timed: {})", problem, plan, describe(problem.op, timed));
    return;
  }
  throw_no_algorithm(problem, "cudnnFind*AlgorithmEx (cudnn_benchmark)", budget, describe(problem.op, timed));
}

}  // namespace tandem::backend::cuda

using tandem::backend::cuda::ConvOp;

fmt::format_context::iterator fmt::formatter<tandem::backend::cuda::ConvProblem>::format(
    const tandem::backend::cuda::ConvProblem& p, fmt::format_context& ctx) const {
  // The names the op's own arguments have: dx and dy for the data gradient, dw and dy for the weights'.
  bool data = p.op == ConvOp::kBackwardData, weights = p.op == ConvOp::kBackwardWeights;
  const tandem::backend::Conv2dParams& q = p.params;
  return fmt::format_to(ctx.out(),
                        "{} {}={} {}={} {}={} format={} stride=({}, {}) padding=({}, {}) dilation=({}, {}) "
                        "groups={} precision={}{}{}",
                        tandem::backend::cuda::conv_op_name(p.op), data ? "dx" : "x", p.x.str(), weights ? "dw" : "w",
                        p.w.str(), p.op == ConvOp::kForward ? "y" : "dy", p.y.str(),
                        tandem::memory_format_name(p.format), q.stride[0], q.stride[1], q.padding[0], q.padding[1],
                        q.dilation[0], q.dilation[1], q.groups, tandem::precision_name(p.options.precision),
                        p.options.deterministic ? " deterministic" : "",
                        p.options.cudnn_benchmark ? " cudnn_benchmark" : "");
}

fmt::format_context::iterator fmt::formatter<tandem::backend::cuda::ConvPlan>::format(
    const tandem::backend::cuda::ConvPlan& p, fmt::format_context& ctx) const {
  std::string_view layout = tandem::backend::cuda::filter_layout_name(p.filter_layout);
  std::string_view type = tandem::dtype_name(p.compute_type);
  if (!p.chosen) {
    return fmt::format_to(ctx.out(), "algo=(not timed yet) workspace budget={} bytes filter={} compute={}",
                          p.workspace_bytes, layout, type);
  }
  return fmt::format_to(ctx.out(), "algo={} math={} workspace={} bytes filter={} compute={}",
                        tandem::backend::cuda::conv_algo_name(p.op, p.algo), tandem::backend::cuda::math_name(p.math),
                        p.workspace_bytes, layout, type);
}
