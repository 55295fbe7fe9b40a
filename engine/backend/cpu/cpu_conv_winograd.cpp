// Winograd convolutions through oneDNN's jit_wino_4x3 kernels (cpu_conv_winograd.h). Each pass
// reorders its activations from our layout (nchw or nhwc) into nChw16c buffers from the caching
// allocator, runs the kernel there, and reorders its result back (adding into dx when asked).
#include "engine/backend/cpu/cpu_conv_winograd.h"

#include <algorithm>
#include <cstring>

#include "engine/backend/cpu/cpu_conv_parts.h"

namespace tandem::backend::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;

constexpr const char* kIntoBlocked = "reorder into nChw16c for a Winograd convolution";
constexpr const char* kOutOfBlocked = "reorder out of nChw16c after a Winograd convolution";

memory::desc blocked_md(const Shape& s) {
  return memory::desc(to_dims(s.dims()), memory::data_type::f32, memory::format_tag::nChw16c);
}

bool is_winograd(const dnnl::primitive_desc_base& pd) { return std::strstr(pd.impl_info_str(), "wino") != nullptr; }

// Makes a plan; a oneDNN without a Winograd kernel for it (unimplemented) gives the unusable
// default plan, so that the caller runs the direct kernel; any other failure is an error.
template <typename Plan, typename Make>
Plan plan_or_unusable(const char* call, std::initializer_list<const Tensor*> tensors, Make make) {
  try {
    Plan plan = make();
    plan.usable = is_winograd(plan.pd);
    return plan;
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented) return Plan{};
    rethrow_dnnl(call, tensors, e);
  }
}

dnnl::convolution_forward::primitive_desc winograd_forward_pd(const Conv2dParams& p, const Shape& x, const Shape& w,
                                                              const Shape& y, bool bias,
                                                              const dnnl::primitive_attr& attr) {
  ConvGeometry g = conv_geometry(p);
  memory::desc w_md = any_weights_md(w, 1);
  auto desc = bias ? dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_winograd,
                                                     blocked_md(x), w_md, vector_md(w[0]), blocked_md(y), g.strides,
                                                     g.dilates, g.pad_l, g.pad_r)
                   : dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_winograd,
                                                     blocked_md(x), w_md, blocked_md(y), g.strides, g.dilates, g.pad_l,
                                                     g.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, attr, cpu_engine());
}

dnnl::reorder reorder_into_blocked(const Tensor& t) {
  return dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), activation_md(t.shape(), t.format()),
                                                     cpu_engine(), blocked_md(t.shape())));
}

// From nChw16c into t, or adding into it.
dnnl::reorder reorder_out_of_blocked(const Tensor& t, bool add) {
  memory::desc user = activation_md(t.shape(), t.format());
  if (add) return adding_reorder(blocked_md(t.shape()), user);
  return dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), blocked_md(t.shape()), cpu_engine(), user));
}

// A buffer for t as nChw16c, from the caching allocator.
memory blocked_buffer(Ctx& ctx, const Tensor& t, Tensor& buffer) {
  buffer = allocate_buffer(ctx, blocked_md(t.shape()));
  return make_memory(blocked_md(t.shape()), buffer);
}

// An input activation reordered into a blocked buffer.
memory input_blocked(Ctx& ctx, const dnnl::reorder& r, const Tensor& t, Tensor& buffer) {
  memory blocked = blocked_buffer(ctx, t, buffer);
  run_reorder(kIntoBlocked, r, make_memory(activation_md(t.shape(), t.format()), t), blocked, t);
  return blocked;
}

// Moves (or adds) a result from its blocked buffer into t.
void finish_output(const dnnl::reorder& r, const memory& blocked, Tensor& t) {
  run_reorder(kOutOfBlocked, r, blocked, make_memory(activation_md(t.shape(), t.format()), t), t);
}

struct ForwardPlan {
  bool usable = false;
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  dnnl::reorder x_in, y_out;
  std::optional<dnnl::reorder> w_reorder;
};

struct BackwardDataPlan {
  bool usable = false;
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data prim;
  dnnl::reorder dy_in, dx_out;
  std::optional<dnnl::reorder> w_reorder;
};

struct BackwardWeightsPlan {
  bool usable = false;
  dnnl::convolution_backward_weights::primitive_desc pd;
  dnnl::convolution_backward_weights prim;
  dnnl::reorder x_in, dy_in;
  std::optional<dnnl::reorder> dw_reorder;  // pd.diff_weights_desc() -> the user's oihw
};

ForwardPlan forward_plan(const Conv2dParams& p, const Tensor& x, const Tensor& w, bool bias, const Tensor& y) {
  ForwardPlan f;
  f.pd = winograd_forward_pd(p, x.shape(), w.shape(), y.shape(), bias, user_scratchpad_attr());
  f.prim = dnnl::convolution_forward(f.pd);
  f.x_in = reorder_into_blocked(x);
  f.y_out = reorder_out_of_blocked(y, false);
  f.w_reorder = reorder_if_needed(weights_md(w.shape(), w.format(), 1), f.pd.weights_desc());
  return f;
}

BackwardDataPlan backward_data_plan(const Conv2dParams& p, const Tensor& dy, const Tensor& w, const Tensor& dx,
                                    bool add) {
  BackwardDataPlan d;
  auto hint = winograd_forward_pd(p, dx.shape(), w.shape(), dy.shape(), false, dnnl::primitive_attr());
  ConvGeometry g = conv_geometry(p);
  dnnl::convolution_backward_data::desc desc(algorithm::convolution_winograd, blocked_md(dx.shape()),
                                             any_weights_md(w.shape(), 1), blocked_md(dy.shape()), g.strides,
                                             g.dilates, g.pad_l, g.pad_r);
  d.pd = dnnl::convolution_backward_data::primitive_desc(desc, user_scratchpad_attr(), cpu_engine(), hint);
  d.prim = dnnl::convolution_backward_data(d.pd);
  d.dy_in = reorder_into_blocked(dy);
  d.dx_out = reorder_out_of_blocked(dx, add);
  d.w_reorder = reorder_if_needed(weights_md(w.shape(), w.format(), 1), d.pd.weights_desc());
  return d;
}

BackwardWeightsPlan backward_weights_plan(const Conv2dParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw,
                                          bool bias) {
  BackwardWeightsPlan bw;
  auto hint = winograd_forward_pd(p, x.shape(), dw.shape(), dy.shape(), bias, dnnl::primitive_attr());
  ConvGeometry g = conv_geometry(p);
  memory::desc x_md = blocked_md(x.shape()), dy_md = blocked_md(dy.shape()), dw_md = any_weights_md(dw.shape(), 1);
  auto desc = bias ? dnnl::convolution_backward_weights::desc(algorithm::convolution_winograd, x_md, dw_md,
                                                              vector_md(dw.dim(0)), dy_md, g.strides, g.dilates,
                                                              g.pad_l, g.pad_r)
                   : dnnl::convolution_backward_weights::desc(algorithm::convolution_winograd, x_md, dw_md, dy_md,
                                                              g.strides, g.dilates, g.pad_l, g.pad_r);
  bw.pd = dnnl::convolution_backward_weights::primitive_desc(desc, user_scratchpad_attr(), cpu_engine(), hint);
  bw.prim = dnnl::convolution_backward_weights(bw.pd);
  bw.x_in = reorder_into_blocked(x);
  bw.dy_in = reorder_into_blocked(dy);
  bw.dw_reorder = reorder_if_needed(bw.pd.diff_weights_desc(), weights_md(dw.shape(), dw.format(), 1));
  return bw;
}

}  // namespace

bool winograd_suits(const Conv2dParams& p, const Shape& x, const Shape& w) {
  if (p.groups != 1 || w[2] != 3 || w[3] != 3 || p.stride != std::array<int64_t, 2>{1, 1} ||
      p.dilation != std::array<int64_t, 2>{1, 1} || p.padding[0] > 1 || p.padding[1] > 1 || x.numel() == 0) {
    return false;
  }
  const int64_t channels = std::min(w[0], w[1]);
  const int64_t out_h = x[2] + 2 * p.padding[0] - 2, out_w = x[3] + 2 * p.padding[1] - 2;
  const int64_t plane_side = std::min(out_h, out_w);
  if (w[0] % 16 != 0 || w[1] % 16 != 0 || plane_side < 4) return false;
  return channels >= 128 || (channels >= 64 && plane_side >= 8);
}

bool winograd_forward(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                      Tensor& y) {
  apply_thread_budget(ctx);
  static PlanCache<ForwardPlan> cache;
  const ForwardPlan& plan = cache.get(conv_key(kWinogradForward, ctx, p, x, w.shape(), w.format(), b.defined()), [&] {
    return plan_or_unusable<ForwardPlan>("convolution_forward::primitive_desc (Winograd)", {&x, &w, &b, &y},
                                         [&] { return forward_plan(p, x, w, b.defined(), y); });
  });
  if (!plan.usable) return false;
  Tensor x_buffer, y_buffer, w_buffer;
  memory y_blocked = blocked_buffer(ctx, y, y_buffer);
  Args args{{DNNL_ARG_SRC, input_blocked(ctx, plan.x_in, x, x_buffer)},
            {DNNL_ARG_WEIGHTS, prepared_weights(ctx, plan.w_reorder, weights_md(w.shape(), w.format(), 1),
                                                plan.pd.weights_desc(), w, w_buffer)},
            {DNNL_ARG_DST, y_blocked}};
  if (b.defined()) args.insert({DNNL_ARG_BIAS, make_memory(vector_md(b.numel()), b)});
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("convolution_forward::execute (Winograd)", {&x, &w, &b, &y}, plan.prim, args);
  finish_output(plan.y_out, y_blocked, y);
  return true;
}

bool winograd_backward_data(Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w, Tensor& dx,
                            bool add) {
  apply_thread_budget(ctx);
  static PlanCache<BackwardDataPlan> cache;
  const BackwardDataPlan& plan =
      cache.get(conv_key(kWinogradBackwardData, ctx, p, dx, w.shape(), w.format(), add), [&] {
        return plan_or_unusable<BackwardDataPlan>("convolution_backward_data::primitive_desc (Winograd)",
                                                  {&dy, &w, &dx}, [&] { return backward_data_plan(p, dy, w, dx, add); });
      });
  if (!plan.usable) return false;
  Tensor dy_buffer, dx_buffer, w_buffer;
  memory dx_blocked = blocked_buffer(ctx, dx, dx_buffer);
  Args args{{DNNL_ARG_DIFF_DST, input_blocked(ctx, plan.dy_in, dy, dy_buffer)},
            {DNNL_ARG_WEIGHTS, prepared_weights(ctx, plan.w_reorder, weights_md(w.shape(), w.format(), 1),
                                                plan.pd.weights_desc(), w, w_buffer)},
            {DNNL_ARG_DIFF_SRC, dx_blocked}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("convolution_backward_data::execute (Winograd)", {&dy, &w, &dx}, plan.prim, args);
  finish_output(plan.dx_out, dx_blocked, dx);
  return true;
}

bool winograd_backward_weights(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& dy, Tensor& dw,
                               Tensor& db) {
  apply_thread_budget(ctx);
  static PlanCache<BackwardWeightsPlan> cache;
  const bool bias = db.defined();
  const BackwardWeightsPlan& plan =
      cache.get(conv_key(kWinogradBackwardWeights, ctx, p, x, dw.shape(), dw.format(), bias), [&] {
        return plan_or_unusable<BackwardWeightsPlan>("convolution_backward_weights::primitive_desc (Winograd)",
                                                     {&x, &dy, &dw, &db},
                                                     [&] { return backward_weights_plan(p, x, dy, dw, bias); });
      });
  if (!plan.usable) return false;
  Tensor x_buffer, dy_buffer, dw_buffer;
  memory user_dw = make_memory(weights_md(dw.shape(), dw.format(), 1), dw);
  memory dw_mem = weight_gradients_target(ctx, plan.dw_reorder, user_dw, plan.pd.diff_weights_desc(), dw_buffer);
  Args args{{DNNL_ARG_SRC, input_blocked(ctx, plan.x_in, x, x_buffer)},
            {DNNL_ARG_DIFF_DST, input_blocked(ctx, plan.dy_in, dy, dy_buffer)},
            {DNNL_ARG_DIFF_WEIGHTS, dw_mem}};
  if (bias) args.insert({DNNL_ARG_DIFF_BIAS, make_memory(vector_md(db.numel()), db)});
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("convolution_backward_weights::execute (Winograd)", {&x, &dy, &dw, &db}, plan.prim, args);
  finish_weight_gradients(plan.dw_reorder, dw_mem, user_dw, dw);
  return true;
}

}  // namespace tandem::backend::cpu
