// Reductions over one axis (sum, mean, max, accumulated in double where they add), the max's
// gradient, and softmax / log_softmax along an axis through oneDNN's softmax_v2 primitive.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/parallel.h"
#include "engine/backend/cpu/plan_cache.h"

namespace tandem::backend::cpu {
namespace {

// x seen as (outer, axis, inner).
struct AxisSplit {
  int64_t outer = 1, size = 1, inner = 1;
};

AxisSplit split_at(const Shape& s, int axis) {
  AxisSplit a;
  for (int d = 0; d < axis; ++d) a.outer *= s[d];
  a.size = s[axis];
  for (int d = axis + 1; d < s.rank(); ++d) a.inner *= s[d];
  return a;
}

struct SoftmaxForwardPlan {
  memory::desc md;
  dnnl::softmax_v2_forward::primitive_desc pd;
  dnnl::softmax_v2_forward prim;
};

struct SoftmaxBackwardPlan {
  memory::desc md;
  dnnl::softmax_v2_backward::primitive_desc pd;
  dnnl::softmax_v2_backward prim;
};

// The tensor as oneDNN sees it for softmax: (outer, axis, inner), softmax over dimension 1.
memory::desc split_md(const AxisSplit& a) {
  return memory::desc({a.outer, a.size, a.inner}, memory::data_type::f32, memory::format_tag::abc);
}

dnnl::softmax_v2_forward::primitive_desc softmax_forward_pd(const memory::desc& md, bool log) {
  dnnl::softmax_v2_forward::desc desc(dnnl::prop_kind::forward_training,
                                      log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, md, md, 1);
  return dnnl::softmax_v2_forward::primitive_desc(desc, user_scratchpad_attr(), cpu_engine());
}

}  // namespace

void reduce_axis(Ctx& ctx, Reduction r, const Tensor& x, int axis, Tensor& y) {
  apply_thread_budget(ctx);
  const AxisSplit a = split_at(x.shape(), axis);
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const double scale = r == Reduction::kMean && a.size > 0 ? 1.0 / static_cast<double>(a.size) : 1.0;
  parallel_for(a.outer * a.inner, [&](int64_t o_i) {
    const int64_t o = o_i / a.inner, i = o_i % a.inner;
    const float* src = px + o * a.size * a.inner + i;
    if (r == Reduction::kMax) {
      // NaN wins, as torch.amax: a comparison with NaN is false, so it is taken explicitly.
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < a.size; ++k) {
        const float v = src[k * a.inner];
        if (v > m || std::isnan(v)) m = v;
        if (std::isnan(m)) break;
      }
      py[o_i] = m;
      return;
    }
    double acc = 0.0;
    for (int64_t k = 0; k < a.size; ++k) acc += src[k * a.inner];
    py[o_i] = static_cast<float>(acc * scale);
  });
}

void max_axis_backward(Ctx& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, int axis, Tensor& dx) {
  apply_thread_budget(ctx);
  const AxisSplit a = split_at(x.shape(), axis);
  const float *px = x.data<float>(), *py = y.data<float>(), *pg = dy.data<float>();
  float* pdx = dx.data<float>();
  parallel_for(a.outer * a.inner, [&](int64_t o_i) {
    const int64_t o = o_i / a.inner, i = o_i % a.inner;
    const int64_t base = o * a.size * a.inner + i;
    const float m = py[o_i];
    int64_t ties = 0;
    for (int64_t k = 0; k < a.size; ++k) ties += px[base + k * a.inner] == m;
    // Tied maxima share the gradient evenly (torch.amax); a NaN maximum passes none (it equals nothing).
    const float share = ties > 0 ? pg[o_i] / static_cast<float>(ties) : 0.0f;
    for (int64_t k = 0; k < a.size; ++k) pdx[base + k * a.inner] = px[base + k * a.inner] == m ? share : 0.0f;
  });
}

void softmax(Ctx& ctx, const Tensor& x, int axis, bool log, Tensor& y) {
  apply_thread_budget(ctx);
  if (x.numel() == 0) return;
  const AxisSplit a = split_at(x.shape(), axis);
  static PlanCache<SoftmaxForwardPlan> cache;
  PlanKey key(1);
  key.add({a.outer, a.size, a.inner, log ? 1 : 0, ctx.num_threads()});
  const SoftmaxForwardPlan& plan = cache.get(key, [&] {
    return dnnl_check("softmax_v2_forward::primitive_desc", {&x, &y}, [&] {
      SoftmaxForwardPlan p{split_md(a), softmax_forward_pd(split_md(a), log), {}};
      p.prim = dnnl::softmax_v2_forward(p.pd);
      return p;
    });
  });
  Args args{{DNNL_ARG_SRC, make_memory(plan.md, x)}, {DNNL_ARG_DST, make_memory(plan.md, y)}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("softmax_v2_forward::execute", {&x, &y}, plan.prim, args);
}

void softmax_backward(Ctx& ctx, const Tensor& y, const Tensor& dy, int axis, bool log, Tensor& dx) {
  apply_thread_budget(ctx);
  if (y.numel() == 0) return;
  const AxisSplit a = split_at(y.shape(), axis);
  static PlanCache<SoftmaxBackwardPlan> cache;
  PlanKey key(2);
  key.add({a.outer, a.size, a.inner, log ? 1 : 0, ctx.num_threads()});
  const SoftmaxBackwardPlan& plan = cache.get(key, [&] {
    return dnnl_check("softmax_v2_backward::primitive_desc", {&y, &dy, &dx}, [&] {
      const memory::desc md = split_md(a);
      dnnl::softmax_v2_backward::desc desc(log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, md,
                                           md, md, 1);
      SoftmaxBackwardPlan p{md, dnnl::softmax_v2_backward::primitive_desc(desc, user_scratchpad_attr(), cpu_engine(),
                                                                          softmax_forward_pd(md, log)),
                            {}};
      p.prim = dnnl::softmax_v2_backward(p.pd);
      return p;
    });
  });
  Args args{{DNNL_ARG_DST, make_memory(plan.md, y)},
            {DNNL_ARG_DIFF_DST, make_memory(plan.md, dy)},
            {DNNL_ARG_DIFF_SRC, make_memory(plan.md, dx)}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("softmax_v2_backward::execute", {&y, &dy, &dx}, plan.prim, args);
}

}  // namespace tandem::backend::cpu
