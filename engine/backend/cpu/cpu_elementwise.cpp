// Elementwise kernels and the full sum. ReLU forward is oneDNN's eltwise primitive, add + ReLU its
// binary primitive with a ReLU post-op; the rest are plain loops (vectorised by the compiler,
// OpenMP-parallel above a grain). Elementwise operands share shape and memory format (checked by
// ops.cpp), so flat indexing is exact.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "engine/backend/cpu/cpu_avx512_bf16.h"
#include "engine/backend/cpu/cpu_bf16.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/parallel.h"
#include "engine/backend/cpu/plan_cache.h"

namespace tandem::backend::cpu {
namespace {

struct EltwisePlan {
  memory::desc md;
  dnnl::eltwise_forward::primitive_desc pd;
  dnnl::eltwise_forward prim;
};

struct BinaryPlan {
  memory::desc md;
  dnnl::binary::primitive_desc pd;
  dnnl::binary prim;
};

// dx = dy where y > 0 (NaN is not) over [begin, end), 16 lanes at a time and the tail one by one.
// The build targets plain x86-64, whose SSE2 loop ran at half the speed on ResNet-20's activations.
template <typename Y>
__attribute__((target("avx512f"))) void relu_backward_avx512(const Y* y, const float* dy, float* dx, int64_t begin,
                                                             int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __mmask16 on = _mm512_cmp_ps_mask(load16(y + i), _mm512_setzero_ps(), _CMP_GT_OQ);
    _mm512_storeu_ps(dx + i, _mm512_maskz_mov_ps(on, _mm512_loadu_ps(dy + i)));
  }
  for (; i < end; ++i) dx[i] = load1(y + i) > 0.0f ? dy[i] : 0.0f;
}

}  // namespace

void relu_forward(Ctx& ctx, const Tensor& x, Tensor& y) {
  apply_thread_budget(ctx);
  static PlanCache<EltwisePlan> cache;
  const EltwisePlan& plan = cache.get(PlanKey(1).add({x.numel(), ctx.num_threads()}), [&] {
    return dnnl_check("eltwise_forward::primitive_desc (relu)", {&x, &y}, [&] {
      EltwisePlan e{flat_md(x), {}, {}};
      dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, e.md, 0.0f);
      e.pd = dnnl::eltwise_forward::primitive_desc(desc, user_scratchpad_attr(), cpu_engine());
      e.prim = dnnl::eltwise_forward(e.pd);
      return e;
    });
  });
  Args args{{DNNL_ARG_SRC, make_memory(plan.md, x)}, {DNNL_ARG_DST, make_memory(plan.md, y)}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("eltwise_forward::execute (relu)", {&x, &y}, plan.prim, args);
}

void relu_backward(Ctx& ctx, const Tensor& y_in, const Tensor& dy, Tensor& dx) {
  apply_thread_budget(ctx);
  const float* g = dy.data<float>();
  float* gx = dx.data<float>();
  if (cpu_has_avx512f()) {  // a bf16 y is read as it is: bf16 activations exist on AVX-512 CPUs only
    const int64_t n = y_in.numel();
    const int threads = n < kParallelGrain ? 1 : thread_budget(ctx);
    const bool bf16 = y_in.dtype() == DType::kBF16;
    const auto* y16 = static_cast<const uint16_t*>(y_in.raw_data());
    const float* y32 = bf16 ? nullptr : y_in.data<float>();
#pragma omp parallel num_threads(threads)
    {
      // Ranges on 16-element boundaries, so only the last thread has a tail.
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads(), vectors = (n + 15) / 16;
      const int64_t begin = std::min(n, vectors * t / nt * 16), end = std::min(n, vectors * (t + 1) / nt * 16);
      if (bf16) {
        relu_backward_avx512(y16, g, gx, begin, end);
      } else {
        relu_backward_avx512(y32, g, gx, begin, end);
      }
    }
    return;
  }
  const Tensor y = f32_of(ctx, y_in);
  const float* out = y.data<float>();
  // Both loads happen on every element: a load under the condition cannot be vectorised and
  // mispredicts on half the elements (it ran at 1.1 ns per element, nine times the add's cost).
  parallel_for(y.numel(), [=](int64_t i) {
    float gi = g[i];
    gx[i] = out[i] > 0.0f ? gi : 0.0f;
  });
}

void add(Ctx& ctx, const Tensor& a, const Tensor& b, Tensor& y) {
  apply_thread_budget(ctx);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y.data<float>();
  parallel_for(y.numel(), [=](int64_t i) { py[i] = pa[i] + pb[i]; });
}

// oneDNN's binary add with its eltwise ReLU as a post-op: one JIT pass, and the same ReLU as
// relu_forward's, so the fused and unfused blocks agree bit for bit.
void add_relu(Ctx& ctx, const Tensor& a, const Tensor& b, Tensor& y) {
  apply_thread_budget(ctx);
  static PlanCache<BinaryPlan> cache;
  const BinaryPlan& plan = cache.get(PlanKey(1).add({a.numel(), ctx.num_threads()}), [&] {
    return dnnl_check("binary::primitive_desc (add + relu)", {&a, &b, &y}, [&] {
      BinaryPlan p{flat_md(a), {}, {}};
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      dnnl::primitive_attr attr = user_scratchpad_attr();
      attr.set_post_ops(ops);
      dnnl::binary::desc desc(dnnl::algorithm::binary_add, p.md, p.md, p.md);
      p.pd = dnnl::binary::primitive_desc(desc, attr, cpu_engine());
      p.prim = dnnl::binary(p.pd);
      return p;
    });
  });
  Args args{{DNNL_ARG_SRC_0, make_memory(plan.md, a)},
            {DNNL_ARG_SRC_1, make_memory(plan.md, b)},
            {DNNL_ARG_DST, make_memory(plan.md, y)}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("binary::execute (add + relu)", {&a, &b, &y}, plan.prim, args);
}

void mul(Ctx& ctx, const Tensor& a, const Tensor& b, Tensor& y) {
  apply_thread_budget(ctx);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y.data<float>();
  parallel_for(y.numel(), [=](int64_t i) { py[i] = pa[i] * pb[i]; });
}

void scale(Ctx& ctx, const Tensor& x, float alpha, Tensor& y) {
  apply_thread_budget(ctx);
  const float* px = x.data<float>();
  float* py = y.data<float>();
  parallel_for(y.numel(), [=](int64_t i) { py[i] = alpha * px[i]; });
}

void axpy(Ctx& ctx, float alpha, const Tensor& x, Tensor& y) {
  apply_thread_budget(ctx);
  const float* px = x.data<float>();
  float* py = y.data<float>();
  parallel_for(y.numel(), [=](int64_t i) { py[i] += alpha * px[i]; });
}

void fill(Ctx& ctx, float value, Tensor& y) {
  apply_thread_budget(ctx);
  float* py = y.data<float>();
  parallel_for(y.numel(), [=](int64_t i) { py[i] = value; });
}

void sum(Ctx& ctx, const Tensor& x, Tensor& y) {
  apply_thread_budget(ctx);
  const float* px = x.data<float>();
  int64_t n = x.numel();
  double total = 0.0;
  // Double accumulation: a float running sum of millions of terms loses digits.
#pragma omp parallel for reduction(+ : total) schedule(static) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) total += px[i];
  y.data<float>()[0] = static_cast<float>(total);
}

void broadcast_scalar(Ctx& ctx, const Tensor& s, Tensor& y) { fill(ctx, s.data<float>()[0], y); }

}  // namespace tandem::backend::cpu
