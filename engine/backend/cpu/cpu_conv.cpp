// Convolution forward and both backwards through oneDNN, in f32 or (precision: bf16) with bf16
// copies of x, dy and the weights and f32 results. Activations stay in the tensor's
// own layout (nchw or nhwc; 16-channel nhwc described as the identical nChw16c, whose kernels are
// faster); weights go to whatever layout the chosen implementation wants (a cheap reorder of the
// small weight tensor), which is what lets oneDNN pick its JIT kernels.
#include <cstring>
#include <optional>
#include <utility>

#include "engine/backend/cpu/cpu_bf16.h"
#include "engine/backend/cpu/cpu_conv_gemm.h"
#include "engine/backend/cpu/cpu_conv_parts.h"
#include "engine/backend/cpu/cpu_conv_winograd.h"
#include "engine/backend/cpu/cpu_kernels.h"

namespace tandem::backend::cpu {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;

bool is_reference(const dnnl::primitive_desc_base& pd) { return std::strncmp(pd.impl_info_str(), "ref", 3) == 0; }
bool uses_amx(const dnnl::primitive_desc_base& pd) { return std::strstr(pd.impl_info_str(), "amx") != nullptr; }

bool cpu_has_amx() {
  static const bool yes = dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_amx;
  return yes;
}

// Makes the plan with the blocked description of the activations first; should oneDNN offer only
// its reference kernel for it, or none, the plain description instead (never slower than before).
// oneDNN 2.6's AMX kernels read plain nhwc only: on an AMX CPU, where the plain description gets
// one and the blocked one does not (bf16), the plain one wins (ResNet-20's 16-channel convolutions
// in bf16: 2 to 4 times faster). Elsewhere no second plan is compiled.
template <typename Make>
auto with_fastest_description(Make make) {
  std::optional<decltype(make(true))> blocked;
  try {
    blocked.emplace(make(true));
  } catch (const dnnl::error&) {  // no implementation for the blocked description: the plain one decides
  }
  if (!blocked || is_reference(blocked->pd)) return make(false);
  if (cpu_has_amx() && !uses_amx(blocked->pd)) {
    try {
      auto plain = make(false);
      if (uses_amx(plain.pd)) return plain;
    } catch (const dnnl::error&) {  // the blocked plan stands
    }
  }
  return std::move(*blocked);
}

struct ForwardPlan {
  memory::desc x_md, y_md, user_w_md;
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  std::optional<dnnl::reorder> w_reorder;  // user layout -> pd.weights_desc()
};

struct BackwardDataPlan {
  memory::desc dx_md, dy_md, user_w_md;
  dnnl::convolution_backward_data::primitive_desc pd;
  dnnl::convolution_backward_data prim;
  std::optional<dnnl::reorder> w_reorder;
};

struct BackwardWeightsPlan {
  memory::desc x_md, dy_md, user_dw_md;
  dnnl::convolution_backward_weights::primitive_desc pd;
  dnnl::convolution_backward_weights prim;
  std::optional<dnnl::reorder> dw_reorder;  // pd.diff_weights_desc() -> user layout
};

BackwardWeightsPlan backward_weights_plan(const Conv2dParams& p, const Tensor& x, const Tensor& dy, const Tensor& dw,
                                          bool bias, bool alias) {
  auto [x_md, dy_md] = activation_mds(p, x, dy, alias);
  BackwardWeightsPlan bw{x_md, dy_md, weights_md(dw.shape(), dw.format(), p.groups), {}, {}, {}};
  auto hint = forward_pd(p, bw.x_md, dw.shape(), bw.dy_md, bias, dnnl::primitive_attr());
  ConvGeometry g = conv_geometry(p);
  memory::desc dw_md = any_weights_md(dw.shape(), p.groups);
  auto desc = bias ? dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, bw.x_md, dw_md,
                                                              vector_md(dw.dim(0)), bw.dy_md, g.strides, g.dilates,
                                                              g.pad_l, g.pad_r)
                   : dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, bw.x_md, dw_md, bw.dy_md,
                                                              g.strides, g.dilates, g.pad_l, g.pad_r);
  bw.pd = dnnl::convolution_backward_weights::primitive_desc(desc, user_scratchpad_attr(), cpu_engine(), hint);
  bw.prim = dnnl::convolution_backward_weights(bw.pd);
  bw.dw_reorder = reorder_if_needed(bw.pd.diff_weights_desc(), bw.user_dw_md);
  return bw;
}

// Backward data of a stride-1 convolution is a forward convolution of dy with the weights turned
// around: input and output channels swapped, the kernel rotated by 180 degrees, padding K-1-pad.
// Only a forward convolution takes a sum post-op, which adds the result into a gradient already
// there (a residual fork's) instead of a separate pass. On planes of 7x7 and more oneDNN 2.6's
// forward kernels (brgconv) also match or outrun its backward-data ones (ResNet-20's 64 channels
// at 7x7: 1.04 against 1.38 ms); on smaller ones they fall behind (ResNet-18's 512 channels at
// 2x2: 3.3 against 1.9 ms), so those keep the backward-data kernel.
constexpr int64_t kSmallestTurnedPlane = 7 * 7;

bool backward_data_as_forward(const Conv2dParams& p, const Shape& w, const Shape& x) {
  return p.groups == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.dilation[0] == 1 && p.dilation[1] == 1 &&
         p.padding[0] <= w[2] - 1 && p.padding[1] <= w[3] - 1 && x[2] * x[3] >= kSmallestTurnedPlane &&
         w.numel() > 0;  // no weights to turn: the backward-data kernel's path, as before
}

Conv2dParams turned_around(const Conv2dParams& p, const Shape& w) {
  Conv2dParams t = p;
  t.padding = {w[2] - 1 - p.padding[0], w[3] - 1 - p.padding[1]};
  return t;
}

struct TurnedPlan {
  memory::desc dy_md, dx_md, turned_w_md;  // turned_w_md: plain oihw of (C, K, R, S)
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  std::optional<dnnl::reorder> w_reorder;
};

// dy is f32, or bf16 (precision: bf16: the products in bf16, dx still f32).
TurnedPlan turned_plan(const Conv2dParams& p, const Tensor& dy, const Shape& w, const Tensor& dx, bool add,
                       bool alias) {
  auto [dy_md, dx_md] = activation_mds(p, dy, dx, alias);
  Shape turned({w[1], w[0], w[2], w[3]});
  TurnedPlan t{dy_md, dx_md, weights_md(turned, MemoryFormat::kContiguous, 1), {}, {}, {}};
  dnnl::primitive_attr attr = user_scratchpad_attr();
  if (add) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  t.pd = forward_pd(turned_around(p, w), t.dy_md, turned, t.dx_md, false, attr);
  t.prim = dnnl::convolution_forward(t.pd);
  t.w_reorder = reorder_if_needed(t.turned_w_md, t.pd.weights_desc());
  return t;
}

// out (C, K, R, S) contiguous = w (K, C, R, S) in its format, channels swapped, kernel rotated.
void turn_weights(const Tensor& w, float* out) {
  const int64_t K = w.dim(0), C = w.dim(1), R = w.dim(2), S = w.dim(3);
  bool last = w.format() == MemoryFormat::kChannelsLast;  // ohwi
  const int64_t sk = last ? R * S * C : C * R * S, sc = last ? 1 : R * S, sr = last ? S * C : S, ss = last ? C : 1;
  const float* in = w.data<float>();
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t k = 0; k < K; ++k) {
      float* o = out + (c * K + k) * R * S;
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t q = 0; q < S; ++q) o[(R - 1 - r) * S + (S - 1 - q)] = in[k * sk + c * sc + r * sr + q * ss];
      }
    }
  }
}

// dx (+)= the forward convolution of dy with the turned weights.
void backward_data_turned(Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w, Tensor& dx,
                          bool add) {
  static PlanCache<TurnedPlan> cache;
  PlanKey key = conv_key(kConvBackwardDataAsForward, ctx, p, dx, w.shape(), w.format(), add);
  const TurnedPlan& plan = cache.get(key, [&] {
    return dnnl_check("convolution_forward::primitive_desc (backward data)", {&dy, &w, &dx}, [&] {
      return with_fastest_description([&](bool alias) { return turned_plan(p, dy, w.shape(), dx, add, alias); });
    });
  });
  Tensor turned = allocate_buffer(ctx, plan.turned_w_md);
  turn_weights(w, static_cast<float*>(turned.raw_data()));
  Tensor w_buffer;
  Args args{{DNNL_ARG_SRC, make_memory(plan.dy_md, dy)},
            {DNNL_ARG_WEIGHTS, prepared_weights(ctx, plan.w_reorder, plan.turned_w_md, plan.pd.weights_desc(), turned,
                                                w_buffer)},
            {DNNL_ARG_DST, make_memory(plan.dx_md, dx)}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("convolution_forward::execute (backward data)", {&dy, &w, &dx}, plan.prim, args);
}

}  // namespace

void conv2d_forward(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                    Tensor& y) {
  if (y.dtype() == DType::kBF16) {  // bf16 output: the f32 result, rounded once (what a GPU's cuDNN writes)
    Tensor y32 = Tensor::empty(y.shape(), DType::kF32, ctx.device(), y.format());
    conv2d_forward(ctx, p, x, w, b, y32);
    to_bf16(ctx, y32, y);
    return;
  }
  apply_thread_budget(ctx);
  const bool bf16 = computes_in_bf16(ctx);
  if (conv_gemm_suits(p, x, w.shape(), y)) return conv_gemm_forward(ctx, p, x, w, b, y);
  if (!bf16 && winograd_suits(p, x.shape(), w.shape()) && winograd_forward(ctx, p, x, w, b, y)) return;
  const Tensor src = bf16 ? bf16_of(ctx, x) : x;  // bf16: its plan reads bf16 x and bf16 weights
  static PlanCache<ForwardPlan> cache;
  const ForwardPlan& plan =
      cache.get(conv_key(kConvForward, ctx, p, src, w.shape(), w.format(), b.defined()), [&] {
        return dnnl_check("convolution_forward::primitive_desc", {&x, &w, &b, &y}, [&] {
          return with_fastest_description([&](bool alias) {
            auto [x_md, y_md] = activation_mds(p, src, y, alias);
            ForwardPlan f{x_md, y_md, weights_md(w.shape(), w.format(), p.groups), {}, {}, {}};
            f.pd = forward_pd(p, f.x_md, w.shape(), f.y_md, b.defined(), user_scratchpad_attr());
            f.prim = dnnl::convolution_forward(f.pd);
            f.w_reorder = reorder_if_needed(f.user_w_md, f.pd.weights_desc());
            return f;
          });
        });
      });
  Tensor w_buffer;
  Args args{{DNNL_ARG_SRC, make_memory(plan.x_md, src)},
            {DNNL_ARG_WEIGHTS, prepared_weights(ctx, plan.w_reorder, plan.user_w_md, plan.pd.weights_desc(), w,
                                                w_buffer)},
            {DNNL_ARG_DST, make_memory(plan.y_md, y)}};
  if (b.defined()) args.insert({DNNL_ARG_BIAS, make_memory(vector_md(b.numel()), b)});
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("convolution_forward::execute", {&x, &w, &b, &y}, plan.prim, args);
}

void conv2d_backward_data(Ctx& ctx, const Conv2dParams& p, const Tensor& dy_in, const Tensor& w, Tensor& dx) {
  apply_thread_budget(ctx);
  const bool bf16 = computes_in_bf16(ctx);
  if (conv_gemm_suits(p, dx, w.shape(), dy_in)) return conv_gemm_backward_data(ctx, p, dy_in, w, dx, false);
  if (!bf16 && winograd_suits(p, dx.shape(), w.shape()) && winograd_backward_data(ctx, p, dy_in, w, dx, false)) {
    return;
  }
  const Tensor dy = bf16 ? bf16_of(ctx, dy_in) : dy_in;  // bf16: bf16 dy and weights, f32 dx
  if (backward_data_as_forward(p, w.shape(), dx.shape())) return backward_data_turned(ctx, p, dy, w, dx, false);
  static PlanCache<BackwardDataPlan> cache;
  const BackwardDataPlan& plan = cache.get(conv_key(kConvBackwardData, ctx, p, dx, w.shape(), w.format(), false), [&] {
    return dnnl_check("convolution_backward_data::primitive_desc", {&dy, &w, &dx}, [&] {
      return with_fastest_description([&](bool alias) {
        auto [dx_md, dy_md] = activation_mds(p, dx, dy, alias);
        BackwardDataPlan d{dx_md, dy_md, weights_md(w.shape(), w.format(), p.groups), {}, {}, {}};
        // The hint is the forward convolution this one differentiates: bf16 in and bf16 weights.
        auto hint = forward_pd(p, bf16 ? as_bf16(d.dx_md) : d.dx_md, w.shape(), d.dy_md, false, dnnl::primitive_attr());
        ConvGeometry g = conv_geometry(p);
        const memory::desc w_any = any_weights_md(w.shape(), p.groups);
        dnnl::convolution_backward_data::desc desc(algorithm::convolution_direct, d.dx_md,
                                                   bf16 ? as_bf16(w_any) : w_any, d.dy_md, g.strides, g.dilates,
                                                   g.pad_l, g.pad_r);
        d.pd = dnnl::convolution_backward_data::primitive_desc(desc, user_scratchpad_attr(), cpu_engine(), hint);
        d.prim = dnnl::convolution_backward_data(d.pd);
        d.w_reorder = reorder_if_needed(d.user_w_md, d.pd.weights_desc());
        return d;
      });
    });
  });
  Tensor w_buffer;
  Args args{{DNNL_ARG_DIFF_DST, make_memory(plan.dy_md, dy)},
            {DNNL_ARG_WEIGHTS, prepared_weights(ctx, plan.w_reorder, plan.user_w_md, plan.pd.weights_desc(), w,
                                                w_buffer)},
            {DNNL_ARG_DIFF_SRC, make_memory(plan.dx_md, dx)}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("convolution_backward_data::execute", {&dy, &w, &dx}, plan.prim, args);
}

void conv2d_backward_data_add(Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w, Tensor& dx) {
  apply_thread_budget(ctx);
  const bool bf16 = computes_in_bf16(ctx);
  if (conv_gemm_suits(p, dx, w.shape(), dy)) return conv_gemm_backward_data(ctx, p, dy, w, dx, true);
  if (!bf16 && winograd_suits(p, dx.shape(), w.shape()) && winograd_backward_data(ctx, p, dy, w, dx, true)) return;
  if (backward_data_as_forward(p, w.shape(), dx.shape())) {
    return backward_data_turned(ctx, p, bf16 ? bf16_of(ctx, dy) : dy, w, dx, true);
  }
  Tensor part = Tensor::empty(dx.shape(), DType::kF32, dx.device(), dx.format());
  conv2d_backward_data(ctx, p, dy, w, part);
  axpy(ctx, 1.0f, part, dx);
}

void conv2d_backward_weights(Ctx& ctx, const Conv2dParams& p, const Tensor& x_in, const Tensor& dy_in, Tensor& dw,
                             Tensor& db) {
  apply_thread_budget(ctx);
  const bool bf16 = computes_in_bf16(ctx);
  if (conv_gemm_suits(p, x_in, dw.shape(), dy_in)) return conv_gemm_backward_weights(ctx, p, x_in, dy_in, dw, db);
  if (!bf16 && winograd_suits(p, x_in.shape(), dw.shape()) && winograd_backward_weights(ctx, p, x_in, dy_in, dw, db)) {
    return;
  }
  // bf16: bf16 x and dy, f32 weight and bias gradients.
  const Tensor x = bf16 ? bf16_of(ctx, x_in) : x_in, dy = bf16 ? bf16_of(ctx, dy_in) : dy_in;
  static PlanCache<BackwardWeightsPlan> cache;
  bool bias = db.defined();
  const BackwardWeightsPlan& plan =
      cache.get(conv_key(kConvBackwardWeights, ctx, p, x, dw.shape(), dw.format(), bias), [&] {
        return dnnl_check("convolution_backward_weights::primitive_desc", {&x, &dy, &dw, &db}, [&] {
          return with_fastest_description([&](bool alias) { return backward_weights_plan(p, x, dy, dw, bias, alias); });
        });
      });
  memory user_dw = make_memory(plan.user_dw_md, dw);
  Tensor dw_buffer;
  memory dw_mem = weight_gradients_target(ctx, plan.dw_reorder, user_dw, plan.pd.diff_weights_desc(), dw_buffer);
  Args args{{DNNL_ARG_SRC, make_memory(plan.x_md, x)},
            {DNNL_ARG_DIFF_DST, make_memory(plan.dy_md, dy)},
            {DNNL_ARG_DIFF_WEIGHTS, dw_mem}};
  if (bias) args.insert({DNNL_ARG_DIFF_BIAS, make_memory(vector_md(db.numel()), db)});
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("convolution_backward_weights::execute", {&x, &dy, &dw, &db}, plan.prim, args);
  finish_weight_gradients(plan.dw_reorder, dw_mem, user_dw, dw);
}

}  // namespace tandem::backend::cpu
