// Matrix products and the linear layer through cuBLASLt.
//
// Layout: our tensors are row-major and cuBLAS(Lt) is column-major. A row-major (r, c) matrix read
// column-major is its (c, r) transpose, so the row-major product c = op(a) op(b) is computed as the
// column-major product c^T = op(b)^T op(a)^T: cuBLASLt's A is our b, its B is our a, its D
// (n rows, m columns, ld n) is our c (m, n) row-major, and the transpose flags carry over as they
// are (our b transposed <-> its A transposed). No operand is ever copied for a transpose.
//
// Bias (linear_forward): CUBLASLT_EPILOGUE_BIAS adds a vector along the rows of D, broadcast over
// its columns; D's rows are our c's columns (the output features), so the (out) bias fits as is.
// Bias gradient (linear_backward_weights): db = column sums of dy, by our own deterministic kernel
// (cuda_matmul_kernels.cu) in double, like the CPU backend, rather than the BGRADB epilogue.
//
// Under bf16 a linear layer's x and dy may come in bf16 already (ops.h's bf16_operand, rounded once
// for the layer's passes): cuBLASLt reads them in place, and the bias gradient sums the bf16 dy.
// A linear layer asked for a bf16 output (ops.h: linear_forward's bf16_output) has cuBLASLt write D
// in bf16 from its f32 accumulator, with a bf16 bias (the epilogue reads the bias in D's type).
//
// Precision (KernelOptions::precision): fp32 -> CUBLAS_COMPUTE_32F (true fp32, never TF32);
// tf32 -> CUBLAS_COMPUTE_32F_FAST_TF32 on the f32 tensors; bf16 -> a and b are converted into bf16
// scratch (cuda_cast.h) and multiplied with CUBLAS_COMPUTE_32F, bf16 A/B and f32 C/D, so outputs and
// accumulation stay f32.
//
// Plans: the matmul descriptor, the layouts and the heuristic's algorithm are cached per problem
// (shapes, transposes, precision, bias, pointer alignments) in the context's state, so a steady
// step creates nothing and asks cuBLASLt nothing but the matmul itself. Workspace: one call to the
// context's workspace per op, a fixed kLtWorkspaceBytes region for cuBLASLt (the heuristic's limit
// is fixed too, so the algorithm choice and its results do not depend on what ran before) followed
// by the bf16 scratch.
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string_view>

#include "engine/backend/cuda/cuda_cast.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_matmul_kernels.h"
#include "engine/core/error.h"

namespace tandem::backend::cuda {
namespace {

// A row-major product c (m, n) = op(a) (m, k) op(b) (k, n), plus bias (n) on every row when the
// bias is defined. Tensors by pointer: they are only read for pointers and, on failure, shapes.
struct Gemm {
  std::string_view op;
  const Tensor* a;
  const Tensor* b;
  const Tensor* bias;
  const Tensor* c;
  bool ta, tb;
  int64_t m, n, k;
  Precision precision;
};

}  // namespace
}  // namespace tandem::backend::cuda

// Error messages name the op, every shape, the transposes and the precision; formatted only on failure.
template <>
struct fmt::formatter<tandem::backend::cuda::Gemm> : fmt::formatter<std::string_view> {
  format_context::iterator format(const tandem::backend::cuda::Gemm& g, format_context& ctx) const {
    return fmt::format_to(ctx.out(), "op={} a={} b={} transpose_a={} transpose_b={} bias={} c={} precision={}",
                          g.op, g.a->shape().str(), g.b->shape().str(), g.ta, g.tb,
                          g.bias->defined() ? g.bias->shape().str() : std::string("none"), g.c->shape().str(),
                          tandem::precision_name(g.precision));
  }
};

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;

// cuBLAS's own recommendation for Hopper; also the heuristic's fixed limit.
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
constexpr size_t kScratchAlign = 256;

size_t align_up(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// The alignment cuBLASLt may assume for a pointer: its largest power-of-two divisor, at most 256
// (the heuristic's default assumption, which an odd-sized tensor's pointer need not meet).
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// One cached problem: descriptors and the chosen algorithm.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // cuBLASLt's A, B and C = D
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;

  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

// (m, n, k, trans A, trans B, precision, bias, alignment of A, B, D, bias, D in bf16), column-major terms.
using LtKey = std::array<int64_t, 12>;

struct LtPlanCache {
  std::map<LtKey, std::unique_ptr<LtPlan>> plans;
};

// What cuBLASLt multiplies, in its column-major terms: D (m, n) = op(A) (m, k) op(B) (k, n).
struct LtOperands {
  const void* a;  // our b (or its bf16 copy)
  const void* b;  // our a (or its bf16 copy)
  void* d;           // our c: f32, or bf16 (a linear layer's bf16 output)
  const void* bias;  // null without bias; in D's type
};

class LtPreference {
 public:
  explicit LtPreference(const Gemm& g) { TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_), "{}", g); }
  ~LtPreference() { cublasLtMatmulPreferenceDestroy(pref_); }
  LtPreference(const LtPreference&) = delete;
  LtPreference& operator=(const LtPreference&) = delete;
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

template <typename T>
void set_desc(const Gemm& g, cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), "attribute={} {}",
                      static_cast<int>(attr), g);
}

template <typename T>
void set_pref(const Gemm& g, const LtPreference& pref, cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
  TANDEM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), attr, &value, sizeof(value)),
                      "attribute={} {}", static_cast<int>(attr), g);
}

// The packed column-major layout of a row-major (rows, cols) tensor: (cols, rows), ld = cols.
cublasLtMatrixLayout_t layout_of_row_major(const Gemm& g, cudaDataType_t type, int64_t rows, int64_t cols) {
  cublasLtMatrixLayout_t layout = nullptr;
  TANDEM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(cols),
                                                 static_cast<uint64_t>(rows), cols),
                      "layout=({}, {}) {}", rows, cols, g);
  return layout;
}

cublasComputeType_t compute_type_of(Precision precision) {
  return precision == Precision::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

bool is_bf16(const Tensor& t) { return t.dtype() == DType::kBF16; }

// Descriptors for the problem, and the heuristic's best algorithm for them.
std::unique_ptr<LtPlan> make_plan(CudaContext& cc, const Gemm& g, const LtOperands& ops, const LtKey& key) {
  auto plan = std::make_unique<LtPlan>();
  const cudaDataType_t in_type = g.precision == Precision::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType_t out_type = key[11] != 0 ? CUDA_R_16BF : CUDA_R_32F;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute_type_of(g.precision), CUDA_R_32F), "{}", g);
  // Swapped operands (see the top of the file): cuBLASLt's A is our b, its B is our a.
  const int32_t trans_a = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t trans_b = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(g, plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, trans_a);
  set_desc(g, plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, trans_b);
  if (ops.bias != nullptr) {
    set_desc(g, plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS));
    set_desc(g, plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(out_type));
    // The heuristic reads the pointer's alignment from here (it is reset before every matmul).
    set_desc(g, plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(ops.bias));
  }
  plan->a = layout_of_row_major(g, in_type, g.b->dim(0), g.b->dim(1));
  plan->b = layout_of_row_major(g, in_type, g.a->dim(0), g.a->dim(1));
  plan->d = layout_of_row_major(g, out_type, g.m, g.n);

  LtPreference pref(g);
  set_pref(g, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kLtWorkspaceBytes));
  set_pref(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(key[7]));
  set_pref(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(key[8]));
  set_pref(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(key[9]));
  set_pref(g, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(key[9]));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  TANDEM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(cc.cublas_lt(), plan->desc, plan->a, plan->b, plan->d, plan->d,
                                                     pref.get(), 1, &result, &returned),
                      "{}", g);
  TANDEM_CHECK(returned > 0 && result.state == CUBLAS_STATUS_SUCCESS, ErrorCode::kUnimplemented,
               "{}: cuBLASLt has no algorithm for this product ({}) within {} bytes of workspace", g.op, g,
               kLtWorkspaceBytes);
  plan->algo = result.algo;
  plan->workspace_bytes = result.workspaceSize;
  return plan;
}

const LtPlan& plan_for(CudaContext& cc, const Gemm& g, const LtOperands& ops) {
  const LtKey key{g.n, g.m, g.k, g.tb ? 1 : 0, g.ta ? 1 : 0, static_cast<int64_t>(g.precision),
                  ops.bias != nullptr ? 1 : 0, alignment_of(ops.a), alignment_of(ops.b), alignment_of(ops.d),
                  ops.bias != nullptr ? alignment_of(ops.bias) : 0, is_bf16(*g.c) ? 1 : 0};
  auto& plans = cc.state<LtPlanCache>().plans;
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(cc, g, ops, key)).first;
  return *it->second;
}

// c = 0 (+ bias on every row): the product of an empty inner dimension, which cuBLASLt is not asked.
void run_empty_inner(CudaContext& cc, const Gemm& g, float* c) {
  TANDEM_CUDA_CHECK(cudaMemsetAsync(c, 0, g.c->nbytes(), cc.stream()), "{}", g);
  if (g.bias->defined()) {
    TANDEM_CUDA_CHECK(detail::launch_broadcast_rows(g.bias->data<float>(), g.m, g.n, c, cc.stream()), "{}", g);
  }
}

// c = product, or c += product when accumulate (cuBLASLt's beta = 1, reading c in place).
void run_gemm(Ctx& ctx, const Gemm& g, bool accumulate = false) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const bool bf16 = g.precision == Precision::kBf16;
  const bool bf16_out = is_bf16(*g.c);
  TANDEM_CHECK(bf16 || (!is_bf16(*g.a) && !is_bf16(*g.b) && !bf16_out), ErrorCode::kInternal,
               "{}: a bf16 operand outside bf16", g);
  // ops.h hands a bf16 c only to linear_forward with K > 0, and its bias in bf16 with it.
  TANDEM_CHECK(!bf16_out || (!accumulate && g.k > 0 && (!g.bias->defined() || is_bf16(*g.bias))),
               ErrorCode::kInternal, "{}: a bf16 c needs K > 0, no accumulation and a bf16 bias", g);
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {
    if (!accumulate) run_empty_inner(cc, g, g.c->data<float>());  // adding an empty sum leaves c as it is
    return;
  }
  // A bf16 operand (a linear layer's bf16_operand) is read in place; an f32 one is rounded into scratch.
  const size_t a_bytes = bf16 && !is_bf16(*g.a) ? align_up(static_cast<size_t>(g.a->numel()) * 2) : 0;
  const size_t b_bytes = bf16 && !is_bf16(*g.b) ? align_up(static_cast<size_t>(g.b->numel()) * 2) : 0;
  char* base = static_cast<char*>(cc.workspace(kLtWorkspaceBytes + a_bytes + b_bytes));
  LtOperands ops{g.b->raw_data(), g.a->raw_data(), g.c->raw_data(), g.bias->defined() ? g.bias->raw_data() : nullptr};
  if (b_bytes > 0) {
    void* b16 = base + kLtWorkspaceBytes;
    cast_f32_to_bf16(g.b->data<float>(), b16, g.b->numel(), cc.stream());
    ops.a = b16;
  }
  if (a_bytes > 0) {
    void* a16 = base + kLtWorkspaceBytes + b_bytes;
    cast_f32_to_bf16(g.a->data<float>(), a16, g.a->numel(), cc.stream());
    ops.b = a16;
  }
  const LtPlan& plan = plan_for(cc, g, ops);
  if (ops.bias != nullptr) {
    set_desc(g, plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(ops.bias));
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  TANDEM_CUBLAS_CHECK(cublasLtMatmul(cc.cublas_lt(), plan.desc, &alpha, ops.a, plan.a, ops.b, plan.b, &beta, ops.d,
                                     plan.d, ops.d, plan.d, &plan.algo, base, plan.workspace_bytes, cc.stream()),
                      "{}", g);
}

}  // namespace

void matmul(Ctx& ctx, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& c) {
  const Tensor none;
  run_gemm(ctx, {"matmul", &a, &b, &none, &c, transpose_a, transpose_b, c.dim(0), c.dim(1),
                 transpose_a ? a.dim(0) : a.dim(1), ctx.options().precision});
}

void linear_forward(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  // (N, in) (in, out) + (out) on every row.
  run_gemm(ctx, {"linear_forward", &x, &w, &b, &y, false, true, x.dim(0), w.dim(0), x.dim(1),
                 ctx.options().precision});
}

void linear_backward_data(Ctx& ctx, const Tensor& dy, const Tensor& w, Tensor& dx) {
  const Tensor none;  // (N, out) (out, in)
  run_gemm(ctx, {"linear_backward_data", &dy, &w, &none, &dx, false, false, dy.dim(0), w.dim(1), dy.dim(1),
                 ctx.options().precision});
}

void linear_backward_weights_add(Ctx& ctx, const Tensor& x, const Tensor& dy, Tensor& dw) {
  const Tensor none;  // dw (out, in) += (out, N) (N, in)
  run_gemm(ctx,
           {"linear_backward_weights_add", &dy, &x, &none, &dw, true, false, dy.dim(1), x.dim(1), dy.dim(0),
            ctx.options().precision},
           true);
}

void linear_backward_weights(Ctx& ctx, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db) {
  const Tensor none;  // (out, N) (N, in)
  run_gemm(ctx, {"linear_backward_weights", &dy, &x, &none, &dw, true, false, dy.dim(1), x.dim(1), dy.dim(0),
                 ctx.options().precision});
  if (!db.defined()) return;
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const cudaError_t launched =
      is_bf16(dy) ? detail::launch_column_sums_bf16(dy.raw_data(), dy.dim(0), dy.dim(1), db.data<float>(), cc.stream())
                  : detail::launch_column_sums(dy.data<float>(), dy.dim(0), dy.dim(1), db.data<float>(), cc.stream());
  TANDEM_CUDA_CHECK(launched, "op=linear_backward_weights (bias gradient) dy=[{}, {}] {} db=[{}]", dy.dim(0),
                    dy.dim(1), dtype_name(dy.dtype()), db.dim(0));
}

}  // namespace tandem::backend::cuda
