// Layer normalization over the last dimension through oneDNN's layer_normalization primitives:
// (M, N) rows normalised with their own mean and biased variance, an optional scale (gamma) and
// shift (beta) per column. The forward's mean and variance are what the backward reads.
#include <bit>

#include "engine/backend/cpu/cpu_column_sums.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/plan_cache.h"

namespace tandem::backend::cpu {
namespace {

struct LayerNormPlan {
  memory::desc data, stat, param;
  dnnl::layer_normalization_forward::primitive_desc forward_pd;
  dnnl::layer_normalization_forward forward;
  dnnl::layer_normalization_backward::primitive_desc backward_pd;
  dnnl::layer_normalization_backward backward;
};

dnnl::normalization_flags flags_for(bool scale, bool shift) {
  auto flags = dnnl::normalization_flags::none;
  if (scale) flags |= dnnl::normalization_flags::use_scale;
  if (shift) flags |= dnnl::normalization_flags::use_shift;
  return flags;
}

const LayerNormPlan& plan_for(Ctx& ctx, float eps, int64_t rows, int64_t cols, bool scale, bool shift,
                              std::initializer_list<const Tensor*> tensors) {
  static PlanCache<LayerNormPlan> cache;
  PlanKey key(1);
  key.add({rows, cols, scale ? 1 : 0, shift ? 1 : 0, ctx.num_threads()});
  key.add(static_cast<int64_t>(std::bit_cast<uint32_t>(eps)));
  return cache.get(key, [&] {
    return dnnl_check("layer_normalization::primitive_desc", tensors, [&] {
      LayerNormPlan p;
      p.data = memory::desc({rows, cols}, memory::data_type::f32, memory::format_tag::ab);
      p.stat = memory::desc({rows}, memory::data_type::f32, memory::format_tag::a);
      p.param = vector_md(cols);
      const auto flags = flags_for(scale, shift);
      dnnl::layer_normalization_forward::desc fd(dnnl::prop_kind::forward_training, p.data, p.stat, eps, flags);
      p.forward_pd = dnnl::layer_normalization_forward::primitive_desc(fd, user_scratchpad_attr(), cpu_engine());
      p.forward = dnnl::layer_normalization_forward(p.forward_pd);
      // The backward primitive computes dx and the scale's gradient; it would want the shift itself
      // as an input to give the shift's gradient, which is just dy's column sums: ours (below).
      const auto bflags = flags_for(scale, false);
      const auto kind = scale ? dnnl::prop_kind::backward : dnnl::prop_kind::backward_data;
      dnnl::layer_normalization_forward::desc hint_d(dnnl::prop_kind::forward_training, p.data, p.stat, eps, bflags);
      dnnl::layer_normalization_forward::primitive_desc hint(hint_d, user_scratchpad_attr(), cpu_engine());
      dnnl::layer_normalization_backward::desc bd(kind, p.data, p.data, p.stat, eps, bflags);
      p.backward_pd =
          dnnl::layer_normalization_backward::primitive_desc(bd, user_scratchpad_attr(), cpu_engine(), hint);
      p.backward = dnnl::layer_normalization_backward(p.backward_pd);
      return p;
    });
  });
}

}  // namespace

void layer_norm_forward(Ctx& ctx, float eps, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                        Tensor& mean, Tensor& var) {
  apply_thread_budget(ctx);
  if (x.numel() == 0) return;
  if (y.dtype() == DType::kBF16) {  // the f32 result, rounded once
    Tensor y32 = Tensor::empty(y.shape(), DType::kF32, ctx.device());
    layer_norm_forward(ctx, eps, x, gamma, beta, y32, mean, var);
    to_bf16(ctx, y32, y);
    return;
  }
  const int64_t cols = x.dim(x.rank() - 1), rows = x.numel() / cols;
  const LayerNormPlan& plan = plan_for(ctx, eps, rows, cols, gamma.defined(), beta.defined(), {&x, &gamma, &beta});
  Args args{{DNNL_ARG_SRC, make_memory(plan.data, x)},
            {DNNL_ARG_DST, make_memory(plan.data, y)},
            {DNNL_ARG_MEAN, make_memory(plan.stat, mean)},
            {DNNL_ARG_VARIANCE, make_memory(plan.stat, var)}};
  if (gamma.defined()) args.insert({DNNL_ARG_SCALE, make_memory(plan.param, gamma)});
  if (beta.defined()) args.insert({DNNL_ARG_SHIFT, make_memory(plan.param, beta)});
  Tensor scratch = add_scratchpad(ctx, plan.forward_pd, args);
  execute("layer_normalization_forward::execute", {&x, &y}, plan.forward, args);
}

void layer_norm_backward(Ctx& ctx, float eps, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                         const Tensor& mean, const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  apply_thread_budget(ctx);
  if (x.numel() == 0) return;
  const int64_t cols = x.dim(x.rank() - 1), rows = x.numel() / cols;
  const bool shift = dbeta.defined();
  const LayerNormPlan& plan = plan_for(ctx, eps, rows, cols, gamma.defined(), shift, {&x, &dy, &gamma});
  Args args{{DNNL_ARG_SRC, make_memory(plan.data, x)},
            {DNNL_ARG_DIFF_DST, make_memory(plan.data, dy)},
            {DNNL_ARG_MEAN, make_memory(plan.stat, mean)},
            {DNNL_ARG_VARIANCE, make_memory(plan.stat, var)},
            {DNNL_ARG_DIFF_SRC, make_memory(plan.data, dx)}};
  if (gamma.defined()) {
    args.insert({DNNL_ARG_SCALE, make_memory(plan.param, gamma)});
    args.insert({DNNL_ARG_DIFF_SCALE, make_memory(plan.param, dgamma)});
  }
  Tensor scratch = add_scratchpad(ctx, plan.backward_pd, args);
  execute("layer_normalization_backward::execute", {&x, &dy, &dx}, plan.backward, args);
  if (!shift) return;
  column_sums(ctx, dy.data<float>(), rows, cols, dbeta.data<float>());  // dbeta, in double
}

}  // namespace tandem::backend::cpu
