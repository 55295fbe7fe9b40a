// Pointwise kernels of N-D tensors on the CPU: broadcasting add, sub, mul and div (plain loops over
// coalesced rows, each operand contiguous or broadcast along the row), the unary functions and
// their derivatives through oneDNN's eltwise primitives (its vectorised exp, erf and tanh; log, sin
// and cos through libm), and
// masked_fill. A unary op's bf16 x is widened first and a bf16 y rounded from the f32 result.
#include <cmath>

#include "engine/backend/cpu/cpu_bf16.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/parallel.h"
#include "engine/backend/cpu/plan_cache.h"
#include "engine/backend/nd_index.h"

namespace tandem::backend::cpu {
namespace {

template <BinaryOp Op>
inline float apply(float a, float b) {
  if constexpr (Op == BinaryOp::kAdd) return a + b;
  if constexpr (Op == BinaryOp::kSub) return a - b;
  if constexpr (Op == BinaryOp::kMul) return a * b;
  return a / b;
}

// One row: each operand steps 1 (contiguous) or 0 (broadcast) along it; the common cases get
// loops the compiler vectorises.
template <BinaryOp Op>
void binary_row(const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = apply<Op>(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const float bv = b[0];
    for (int64_t i = 0; i < n; ++i) y[i] = apply<Op>(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    const float av = a[0];
    for (int64_t i = 0; i < n; ++i) y[i] = apply<Op>(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = apply<Op>(a[i * sa], b[i * sb]);
  }
}

template <BinaryOp Op>
void binary_loop(const NdView& va, const float* a, const NdView& vb, const float* b, float* y, int64_t n) {
  const int64_t inner = va.inner_size();
  const int64_t rows = inner > 0 ? n / inner : 0;
  const int64_t sa = va.inner_stride(), sb = vb.inner_stride();
  auto row = [&](int64_t r) {
    binary_row<Op>(a + va.offset(r * inner), sa, b + vb.offset(r * inner), sb, y + r * inner, inner);
  };
  if (n < kParallelGrain) {
    for (int64_t r = 0; r < rows; ++r) row(r);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) row(r);
}

struct UnaryAlgorithm {
  dnnl::algorithm forward, backward;
  float alpha = 0.0f, beta = 0.0f;
  bool backward_reads_y = false;  // the *_use_dst_for_bwd variants take y instead of x
};

UnaryAlgorithm algorithm_of(UnaryOp op) {
  using dnnl::algorithm;
  switch (op) {
    case UnaryOp::kExp: return {algorithm::eltwise_exp, algorithm::eltwise_exp_use_dst_for_bwd, 0, 0, true};
    case UnaryOp::kLog: return {algorithm::eltwise_log, algorithm::eltwise_log};
    case UnaryOp::kSqrt: return {algorithm::eltwise_sqrt, algorithm::eltwise_sqrt_use_dst_for_bwd, 0, 0, true};
    case UnaryOp::kRsqrt: return {algorithm::eltwise_pow, algorithm::eltwise_pow, 1.0f, -0.5f};
    case UnaryOp::kTanh: return {algorithm::eltwise_tanh, algorithm::eltwise_tanh_use_dst_for_bwd, 0, 0, true};
    case UnaryOp::kGeluErf: return {algorithm::eltwise_gelu_erf, algorithm::eltwise_gelu_erf};
    case UnaryOp::kGeluTanh: return {algorithm::eltwise_gelu_tanh, algorithm::eltwise_gelu_tanh};
    case UnaryOp::kSigmoid:
      return {algorithm::eltwise_logistic, algorithm::eltwise_logistic_use_dst_for_bwd, 0, 0, true};
    case UnaryOp::kSilu: return {algorithm::eltwise_swish, algorithm::eltwise_swish, 1.0f, 0.0f};  // x sigmoid(1 x)
    case UnaryOp::kAbs: return {algorithm::eltwise_abs, algorithm::eltwise_abs};
    case UnaryOp::kSin:
    case UnaryOp::kCos: break;  // libm loops (unary, unary_backward)
  }
  return {algorithm::eltwise_linear, algorithm::eltwise_linear, 1.0f, 0.0f};
}

struct UnaryForwardPlan {
  memory::desc md;
  dnnl::eltwise_forward::primitive_desc pd;
  dnnl::eltwise_forward prim;
};

struct UnaryBackwardPlan {
  memory::desc md;
  dnnl::eltwise_backward::primitive_desc pd;
  dnnl::eltwise_backward prim;
};

// f(i) for i in [0, n), on the context's threads when n is large.
template <typename F>
void pointwise(int64_t n, F f) {
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// The functions oneDNN's eltwise lacks (sin, cos) or computes too loosely (its eltwise_log is off
// by up to ~1.4e-6 absolute, 1,832 ulp near 1; glibc's logf is within an ulp of the true value, as
// PyTorch's CPU log is): libm, element by element. False for the rest.
bool libm_forward(UnaryOp op, const float* x, float* y, int64_t n) {
  switch (op) {
    case UnaryOp::kLog: pointwise(n, [&](int64_t i) { y[i] = std::log(x[i]); }); return true;
    case UnaryOp::kSin: pointwise(n, [&](int64_t i) { y[i] = std::sin(x[i]); }); return true;
    case UnaryOp::kCos: pointwise(n, [&](int64_t i) { y[i] = std::cos(x[i]); }); return true;
    default: return false;
  }
}

bool libm_backward(UnaryOp op, const float* x, const float* dy, float* dx, int64_t n) {
  switch (op) {
    case UnaryOp::kSin: pointwise(n, [&](int64_t i) { dx[i] = dy[i] * std::cos(x[i]); }); return true;
    case UnaryOp::kCos: pointwise(n, [&](int64_t i) { dx[i] = -dy[i] * std::sin(x[i]); }); return true;
    default: return false;
  }
}

dnnl::eltwise_forward::primitive_desc forward_pd(const UnaryAlgorithm& alg, dnnl::algorithm which,
                                                 const memory::desc& md) {
  dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_training, which, md, alg.alpha, alg.beta);
  return dnnl::eltwise_forward::primitive_desc(desc, user_scratchpad_attr(), cpu_engine());
}

}  // namespace

void binary(Ctx& ctx, BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  apply_thread_budget(ctx);
  const int64_t n = y.numel();
  if (n == 0) return;
  NdView va = broadcast_view(a.shape(), y.shape()), vb = broadcast_view(b.shape(), y.shape());
  NdView* views[] = {&va, &vb};
  coalesce(views);
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float* py = y.data<float>();
  switch (op) {
    case BinaryOp::kAdd: return binary_loop<BinaryOp::kAdd>(va, pa, vb, pb, py, n);
    case BinaryOp::kSub: return binary_loop<BinaryOp::kSub>(va, pa, vb, pb, py, n);
    case BinaryOp::kMul: return binary_loop<BinaryOp::kMul>(va, pa, vb, pb, py, n);
    case BinaryOp::kDiv: return binary_loop<BinaryOp::kDiv>(va, pa, vb, pb, py, n);
  }
}

void unary(Ctx& ctx, UnaryOp op, const Tensor& x_in, Tensor& y) {
  apply_thread_budget(ctx);
  if (x_in.numel() == 0) return;
  const Tensor x = f32_of(ctx, x_in);  // a bf16 x (a linear layer's bf16 output), widened
  if (y.dtype() == DType::kBF16) {     // the f32 result, rounded once
    Tensor y32 = Tensor::empty(y.shape(), DType::kF32, ctx.device(), y.format());
    unary(ctx, op, x, y32);
    to_bf16(ctx, y32, y);
    return;
  }
  if (libm_forward(op, x.data<float>(), y.data<float>(), x.numel())) return;
  static PlanCache<UnaryForwardPlan> cache;
  const UnaryForwardPlan& plan = cache.get(PlanKey(1).add({static_cast<int64_t>(op), x.numel(), ctx.num_threads()}), [&] {
    return dnnl_check("eltwise_forward::primitive_desc", {&x, &y}, [&] {
      UnaryAlgorithm alg = algorithm_of(op);
      UnaryForwardPlan p{flat_md(x), forward_pd(alg, alg.forward, flat_md(x)), {}};
      p.prim = dnnl::eltwise_forward(p.pd);
      return p;
    });
  });
  Args args{{DNNL_ARG_SRC, make_memory(plan.md, x)}, {DNNL_ARG_DST, make_memory(plan.md, y)}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("eltwise_forward::execute", {&x, &y}, plan.prim, args);
}

void unary_backward(Ctx& ctx, UnaryOp op, const Tensor& x_in, const Tensor& y, const Tensor& dy, Tensor& dx) {
  apply_thread_budget(ctx);
  if (x_in.numel() == 0) return;
  const Tensor x = f32_of(ctx, x_in);
  if (libm_backward(op, x.data<float>(), dy.data<float>(), dx.data<float>(), x.numel())) return;
  static PlanCache<UnaryBackwardPlan> cache;
  const UnaryAlgorithm alg = algorithm_of(op);
  const UnaryBackwardPlan& plan = cache.get(PlanKey(2).add({static_cast<int64_t>(op), x.numel(), ctx.num_threads()}), [&] {
    return dnnl_check("eltwise_backward::primitive_desc", {&x, &dy, &dx}, [&] {
      const memory::desc md = flat_md(x);
      dnnl::eltwise_backward::desc desc(alg.backward, md, md, alg.alpha, alg.beta);
      UnaryBackwardPlan p{md, dnnl::eltwise_backward::primitive_desc(desc, user_scratchpad_attr(), cpu_engine(),
                                                                     forward_pd(alg, alg.backward, md)),
                          {}};
      p.prim = dnnl::eltwise_backward(p.pd);
      return p;
    });
  });
  // The *_use_dst_for_bwd algorithms read the forward's output where the others read its input.
  Args args{{alg.backward_reads_y ? DNNL_ARG_DST : DNNL_ARG_SRC, make_memory(plan.md, alg.backward_reads_y ? y : x)},
            {DNNL_ARG_DIFF_DST, make_memory(plan.md, dy)},
            {DNNL_ARG_DIFF_SRC, make_memory(plan.md, dx)}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("eltwise_backward::execute", {&x, &dy, &dx}, plan.prim, args);
}

void masked_fill(Ctx& ctx, const Tensor& x, const Tensor& mask, float value, Tensor& y) {
  apply_thread_budget(ctx);
  const int64_t n = x.numel();
  if (n == 0) return;
  NdView vm = broadcast_view(mask.shape(), x.shape());
  NdView* views[] = {&vm};
  coalesce(views);
  const float* px = x.data<float>();
  const uint8_t* pm = mask.data<uint8_t>();
  float* py = y.data<float>();
  const int64_t inner = vm.inner_size(), sm = vm.inner_stride();
  parallel_for(n / inner, [&](int64_t r) {
    const uint8_t* m = pm + vm.offset(r * inner);
    const float* src = px + r * inner;
    float* dst = py + r * inner;
    for (int64_t i = 0; i < inner; ++i) dst[i] = m[i * sm] != 0 ? value : src[i];
  });
}

}  // namespace tandem::backend::cpu
