// Max and average pooling through oneDNN's pooling_v2. Max pooling keeps oneDNN's workspace
// (the argmax of each window) for its backward; average pooling needs only shapes.
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/plan_cache.h"

namespace tandem::backend::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using PoolForward = dnnl::pooling_v2_forward;
using PoolBackward = dnnl::pooling_v2_backward;

enum PlanOp : int64_t { kMaxForward = 1, kMaxBackward, kAvgForward, kAvgBackward };

struct ForwardPlan {
  memory::desc x_md, y_md;
  PoolForward::primitive_desc pd;
  PoolForward prim;
};

struct BackwardPlan {
  memory::desc dx_md, dy_md;
  PoolBackward::primitive_desc pd;
  PoolBackward prim;
};

algorithm pool_algorithm(bool max, const Pool2dParams& p) {
  if (max) return algorithm::pooling_max;
  return p.count_include_pad ? algorithm::pooling_avg_include_padding : algorithm::pooling_avg_exclude_padding;
}

PlanKey pool_key(PlanOp op, const Ctx& ctx, const Pool2dParams& p, const Shape& x, MemoryFormat format) {
  PlanKey key(op);
  key.add(x.dims()).add({p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0], p.padding[1]});
  return key.add({p.count_include_pad ? 1 : 0, static_cast<int64_t>(format), ctx.num_threads()});
}

// Padding right equals padding left: oneDNN and we derive the output size by the same floor division.
PoolForward::primitive_desc forward_pd(bool max, const Pool2dParams& p, const memory::desc& x_md,
                                       const memory::desc& y_md) {
  PoolForward::desc desc(prop_kind::forward_training, pool_algorithm(max, p), x_md, y_md, {p.stride[0], p.stride[1]},
                         {p.kernel[0], p.kernel[1]}, {0, 0}, {p.padding[0], p.padding[1]},
                         {p.padding[0], p.padding[1]});
  return PoolForward::primitive_desc(desc, user_scratchpad_attr(), cpu_engine());
}

const ForwardPlan& forward_plan(bool max, Ctx& ctx, const Pool2dParams& p, const Tensor& x, const Tensor& y) {
  static PlanCache<ForwardPlan> cache;
  return cache.get(pool_key(max ? kMaxForward : kAvgForward, ctx, p, x.shape(), x.format()), [&] {
    return dnnl_check("pooling_v2_forward::primitive_desc", {&x, &y}, [&] {
      ForwardPlan f{activation_md(x.shape(), x.format()), activation_md(y.shape(), y.format()), {}, {}};
      f.pd = forward_pd(max, p, f.x_md, f.y_md);
      f.prim = PoolForward(f.pd);
      return f;
    });
  });
}

const BackwardPlan& backward_plan(bool max, Ctx& ctx, const Pool2dParams& p, const Tensor& dy, const Tensor& dx) {
  static PlanCache<BackwardPlan> cache;
  return cache.get(pool_key(max ? kMaxBackward : kAvgBackward, ctx, p, dx.shape(), dx.format()), [&] {
    return dnnl_check("pooling_v2_backward::primitive_desc", {&dy, &dx}, [&] {
      BackwardPlan b{activation_md(dx.shape(), dx.format()), activation_md(dy.shape(), dy.format()), {}, {}};
      auto hint = forward_pd(max, p, b.dx_md, b.dy_md);
      PoolBackward::desc desc(pool_algorithm(max, p), b.dx_md, b.dy_md, {p.stride[0], p.stride[1]},
                              {p.kernel[0], p.kernel[1]}, {0, 0}, {p.padding[0], p.padding[1]},
                              {p.padding[0], p.padding[1]});
      b.pd = PoolBackward::primitive_desc(desc, user_scratchpad_attr(), cpu_engine(), hint);
      b.prim = PoolBackward(b.pd);
      return b;
    });
  });
}

void pool_forward(bool max, Ctx& ctx, const Pool2dParams& p, const Tensor& x, Tensor& y, Tensor* workspace) {
  apply_thread_budget(ctx);
  const ForwardPlan& plan = forward_plan(max, ctx, p, x, y);
  Args args{{DNNL_ARG_SRC, make_memory(plan.x_md, x)}, {DNNL_ARG_DST, make_memory(plan.y_md, y)}};
  if (workspace != nullptr) {
    *workspace = allocate_buffer(ctx, plan.pd.workspace_desc());
    args.insert({DNNL_ARG_WORKSPACE, make_memory(plan.pd.workspace_desc(), *workspace)});
  }
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("pooling_v2_forward::execute", {&x, &y}, plan.prim, args);
}

void pool_backward(bool max, Ctx& ctx, const Pool2dParams& p, const Tensor& dy, const Tensor* workspace,
                   Tensor& dx) {
  apply_thread_budget(ctx);
  const BackwardPlan& plan = backward_plan(max, ctx, p, dy, dx);
  Args args{{DNNL_ARG_DIFF_DST, make_memory(plan.dy_md, dy)}, {DNNL_ARG_DIFF_SRC, make_memory(plan.dx_md, dx)}};
  if (workspace != nullptr) {
    TANDEM_CHECK(workspace->nbytes() == plan.pd.workspace_desc().get_size(), ErrorCode::kInvalidArgument,
                 "max_pool2d_backward: workspace has {} bytes, the forward of this shape makes {}",
                 workspace->nbytes(), plan.pd.workspace_desc().get_size());
    args.insert({DNNL_ARG_WORKSPACE, make_memory(plan.pd.workspace_desc(), *workspace)});
  }
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("pooling_v2_backward::execute", {&dy, &dx}, plan.prim, args);
}

}  // namespace

void max_pool2d_forward(Ctx& ctx, const Pool2dParams& p, const Tensor& x, Tensor& y, Tensor& workspace) {
  pool_forward(true, ctx, p, x, y, &workspace);
}

void max_pool2d_backward(Ctx& ctx, const Pool2dParams& p, const Tensor& /*x*/, const Tensor& dy,
                         const Tensor& workspace, Tensor& dx) {
  pool_backward(true, ctx, p, dy, &workspace, dx);
}

void avg_pool2d_forward(Ctx& ctx, const Pool2dParams& p, const Tensor& x, Tensor& y) {
  pool_forward(false, ctx, p, x, y, nullptr);
}

void avg_pool2d_backward(Ctx& ctx, const Pool2dParams& p, const Tensor& dy, Tensor& dx) {
  pool_backward(false, ctx, p, dy, nullptr, dx);
}

}  // namespace tandem::backend::cpu
