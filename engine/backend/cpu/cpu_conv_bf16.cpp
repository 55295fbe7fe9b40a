// Convolutions under precision: bf16. x and dy come as bf16 (autograd's bf16_operand, made once for
// the three passes) or f32 (rounded here). The activations' bf16 copies keep their layout (nchw, nhwc,
// or nhwc of 16 channels described as the identical nChw16c); one reorder converts the f32 weights
// and lays them out as the kernel wants; results (y, dx, dw, db) are written in f32 and the bias is
// added in f32. On AVX512-BF16 these are oneDNN's avx512_core_bf16 kernels, about twice its f32
// ones (ResNet-20's 3x3 layers: forward 2.1 against 1.1 ms); with AMX, its amx kernels.
#include <utility>

#include "engine/backend/cpu/cpu_bf16.h"
#include "engine/backend/cpu/cpu_conv_parts.h"
#include "engine/backend/cpu/cpu_kernels.h"

namespace tandem::backend::cpu {
namespace {

using dnnl::algorithm;

memory::desc any_bf16_weights(const Shape& w, int64_t groups) { return as_bf16(any_weights_md(w, groups)); }

struct ForwardPlan {
  memory::desc x16_md, y_md, user_w_md;
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  std::optional<dnnl::reorder> w_reorder;  // f32 user layout -> bf16 kernel layout
};

struct BackwardDataPlan {
  memory::desc dx_md, dy16_md, user_w_md;
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data prim;
  std::optional<dnnl::reorder> w_reorder;
};

struct BackwardWeightsPlan {
  memory::desc x16_md, dy16_md, user_dw_md;
  dnnl::convolution_backward_weights::primitive_desc pd;
  dnnl::convolution_backward_weights prim;
  std::optional<dnnl::reorder> dw_reorder;  // f32 kernel layout -> user layout
};

ForwardPlan forward_plan(const Conv2dParams& p, const Tensor& x, const Tensor& w, bool bias, const Tensor& y) {
  auto [x_md, y_md] = activation_mds(p, x, y, true);
  ForwardPlan f{as_bf16(x_md), y_md, weights_md(w.shape(), w.format(), p.groups), {}, {}, {}};
  f.pd = forward_pd(p, f.x16_md, w.shape(), f.y_md, bias, user_scratchpad_attr());
  f.prim = dnnl::convolution_forward(f.pd);
  f.w_reorder = reorder_if_needed(f.user_w_md, f.pd.weights_desc());
  return f;
}

BackwardDataPlan backward_data_plan(const Conv2dParams& p, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  auto [dx_md, dy_md] = activation_mds(p, dx, dy, true);
  BackwardDataPlan d{dx_md, as_bf16(dy_md), weights_md(w.shape(), w.format(), p.groups), {}, {}, {}};
  auto hint = forward_pd(p, as_bf16(dx_md), w.shape(), d.dy16_md, false, dnnl::primitive_attr());
  ConvGeometry g = conv_geometry(p);
  dnnl::convolution_backward_data::desc desc(algorithm::convolution_direct, d.dx_md,
                                             any_bf16_weights(w.shape(), p.groups), d.dy16_md, g.strides, g.dilates,
                                             g.pad_l, g.pad_r);
  d.pd = dnnl::convolution_backward_data::primitive_desc(desc, user_scratchpad_attr(), cpu_engine(), hint);
  d.prim = dnnl::convolution_backward_data(d.pd);
  d.w_reorder = reorder_if_needed(d.user_w_md, d.pd.weights_desc());
  return d;
}

BackwardWeightsPlan backward_weights_plan(const Conv2dParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw,
                                          bool bias) {
  auto [x_md, dy_md] = activation_mds(p, x, dy, true);
  BackwardWeightsPlan b{as_bf16(x_md), as_bf16(dy_md), weights_md(dw.shape(), dw.format(), p.groups), {}, {}, {}};
  auto hint = forward_pd(p, b.x16_md, dw.shape(), b.dy16_md, bias, dnnl::primitive_attr());
  ConvGeometry g = conv_geometry(p);
  memory::desc dw_md = any_weights_md(dw.shape(), p.groups);  // f32: the gradients stay f32
  auto desc = bias ? dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, b.x16_md, dw_md,
                                                              vector_md(dw.dim(0)), b.dy16_md, g.strides, g.dilates,
                                                              g.pad_l, g.pad_r)
                   : dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, b.x16_md, dw_md,
                                                              b.dy16_md, g.strides, g.dilates, g.pad_l, g.pad_r);
  b.pd = dnnl::convolution_backward_weights::primitive_desc(desc, user_scratchpad_attr(), cpu_engine(), hint);
  b.prim = dnnl::convolution_backward_weights(b.pd);
  b.dw_reorder = reorder_if_needed(b.pd.diff_weights_desc(), b.user_dw_md);
  return b;
}

}  // namespace

void conv2d_forward_bf16(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                         Tensor& y) {
  static PlanCache<ForwardPlan> cache;
  const ForwardPlan& plan = cache.get(conv_key(kBf16Forward, ctx, p, x, w.shape(), w.format(), b.defined()), [&] {
    return dnnl_check("convolution_forward::primitive_desc (bf16)", {&x, &w, &b, &y},
                      [&] { return forward_plan(p, x, w, b.defined(), y); });
  });
  Tensor x16 = bf16_of(ctx, x), w_buffer;
  Args args{{DNNL_ARG_SRC, make_memory(plan.x16_md, x16)},
            {DNNL_ARG_WEIGHTS, prepared_weights(ctx, plan.w_reorder, plan.user_w_md, plan.pd.weights_desc(), w,
                                                w_buffer)},
            {DNNL_ARG_DST, make_memory(plan.y_md, y)}};
  if (b.defined()) args.insert({DNNL_ARG_BIAS, make_memory(vector_md(b.numel()), b)});
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("convolution_forward::execute (bf16)", {&x, &w, &b, &y}, plan.prim, args);
}

void conv2d_backward_data_bf16(Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w, Tensor& dx) {
  static PlanCache<BackwardDataPlan> cache;
  const BackwardDataPlan& plan = cache.get(conv_key(kBf16BackwardData, ctx, p, dx, w.shape(), w.format(), false), [&] {
    return dnnl_check("convolution_backward_data::primitive_desc (bf16)", {&dy, &w, &dx},
                      [&] { return backward_data_plan(p, dy, w, dx); });
  });
  Tensor dy16 = bf16_of(ctx, dy), w_buffer;
  Args args{{DNNL_ARG_DIFF_DST, make_memory(plan.dy16_md, dy16)},
            {DNNL_ARG_WEIGHTS, prepared_weights(ctx, plan.w_reorder, plan.user_w_md, plan.pd.weights_desc(), w,
                                                w_buffer)},
            {DNNL_ARG_DIFF_SRC, make_memory(plan.dx_md, dx)}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("convolution_backward_data::execute (bf16)", {&dy, &w, &dx}, plan.prim, args);
}

void conv2d_backward_weights_bf16(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& dy, Tensor& dw,
                                  Tensor& db) {
  static PlanCache<BackwardWeightsPlan> cache;
  const bool bias = db.defined();
  const BackwardWeightsPlan& plan =
      cache.get(conv_key(kBf16BackwardWeights, ctx, p, x, dw.shape(), dw.format(), bias), [&] {
        return dnnl_check("convolution_backward_weights::primitive_desc (bf16)", {&x, &dy, &dw, &db},
                          [&] { return backward_weights_plan(p, x, dy, dw, bias); });
      });
  Tensor x16 = bf16_of(ctx, x), dy16 = bf16_of(ctx, dy), dw_buffer;
  memory user_dw = make_memory(plan.user_dw_md, dw);
  memory dw_mem = weight_gradients_target(ctx, plan.dw_reorder, user_dw, plan.pd.diff_weights_desc(), dw_buffer);
  Args args{{DNNL_ARG_SRC, make_memory(plan.x16_md, x16)},
            {DNNL_ARG_DIFF_DST, make_memory(plan.dy16_md, dy16)},
            {DNNL_ARG_DIFF_WEIGHTS, dw_mem}};
  if (bias) args.insert({DNNL_ARG_DIFF_BIAS, make_memory(vector_md(db.numel()), db)});
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("convolution_backward_weights::execute (bf16)", {&x, &dy, &dw, &db}, plan.prim, args);
  finish_weight_gradients(plan.dw_reorder, dw_mem, user_dw, dw);
}

}  // namespace tandem::backend::cpu
