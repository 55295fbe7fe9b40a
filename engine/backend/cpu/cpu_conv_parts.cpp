// The shared pieces of the CPU convolutions (cpu_conv_parts.h).
#include "engine/backend/cpu/cpu_conv_parts.h"

#include "engine/backend/cpu/cpu_bf16.h"

namespace tandem::backend::cpu {

ConvGeometry conv_geometry(const Conv2dParams& p) {
  // oneDNN counts dilation from 0 (no gap); the right padding is the same as the left because
  // both oneDNN and we derive the output size with the same floor division.
  return {{p.stride[0], p.stride[1]},
          {p.dilation[0] - 1, p.dilation[1] - 1},
          {p.padding[0], p.padding[1]},
          {p.padding[0], p.padding[1]}};
}

memory::desc any_weights_md(const Shape& w, int64_t groups) {
  memory::dims dims = groups == 1 ? to_dims(w.dims()) : memory::dims{groups, w[0] / groups, w[1], w[2], w[3]};
  return memory::desc(dims, memory::data_type::f32, memory::format_tag::any);
}

dnnl::convolution_forward::primitive_desc forward_pd(const Conv2dParams& p, const memory::desc& x_md,
                                                     const Shape& w, const memory::desc& y_md, bool bias,
                                                     const dnnl::primitive_attr& attr) {
  ConvGeometry g = conv_geometry(p);
  memory::desc w_md = any_weights_md(w, p.groups);
  if (x_md.data.data_type == dnnl_bf16) w_md = as_bf16(w_md);  // bf16 products: bf16 weights too
  const auto prop = dnnl::prop_kind::forward_training;
  const auto direct = dnnl::algorithm::convolution_direct;
  auto desc = bias ? dnnl::convolution_forward::desc(prop, direct, x_md, w_md, vector_md(w[0]), y_md, g.strides,
                                                     g.dilates, g.pad_l, g.pad_r)
                   : dnnl::convolution_forward::desc(prop, direct, x_md, w_md, y_md, g.strides, g.dilates, g.pad_l,
                                                     g.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, attr, cpu_engine());
}

std::pair<memory::desc, memory::desc> activation_mds(const Conv2dParams& p, const Tensor& a, const Tensor& b,
                                                     bool alias) {
  const bool blocked = alias && p.groups == 1 && is_blocked16_alias(a.shape(), a.format()) &&
                       is_blocked16_alias(b.shape(), b.format());
  auto md = [&](const Tensor& t) {
    memory::desc d = blocked ? fastest_activation_md(t.shape(), t.format()) : activation_md(t.shape(), t.format());
    return t.dtype() == DType::kBF16 ? as_bf16(d) : d;
  };
  return {md(a), md(b)};
}

PlanKey conv_key(ConvPlanOp op, const Ctx& ctx, const Conv2dParams& p, const Tensor& act, const Shape& w,
                 MemoryFormat w_format, bool flag) {
  PlanKey key(op);
  key.add(act.shape().dims()).add(w.dims()).add({p.stride[0], p.stride[1], p.padding[0], p.padding[1]});
  key.add({p.dilation[0], p.dilation[1], p.groups, static_cast<int64_t>(act.format())});
  key.add({static_cast<int64_t>(w_format), flag ? 1 : 0, ctx.num_threads(),
           static_cast<int64_t>(ctx.options().precision)});
  return key;
}

std::optional<dnnl::reorder> reorder_if_needed(const memory::desc& from, const memory::desc& to) {
  if (from == to) return std::nullopt;
  return dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), from, cpu_engine(), to));
}

dnnl::reorder adding_reorder(const memory::desc& from, const memory::desc& to) {
  dnnl::post_ops ops;
  ops.append_sum(1.0f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  return dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), from, cpu_engine(), to, attr));
}

void run_reorder(const char* what, const dnnl::reorder& r, const memory& src, const memory& dst, const Tensor& t) {
  Args args{{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
  execute(what, {&t}, r, args);
}

memory prepared_weights(Ctx& ctx, const std::optional<dnnl::reorder>& r, const memory::desc& user_md,
                        const memory::desc& want_md, const Tensor& w, Tensor& buffer) {
  memory user = make_memory(user_md, w);
  if (!r) return user;
  buffer = allocate_buffer(ctx, want_md);
  memory wanted = make_memory(want_md, buffer);
  run_reorder("reorder of convolution weights", *r, user, wanted, w);
  return wanted;
}

memory weight_gradients_target(Ctx& ctx, const std::optional<dnnl::reorder>& r, const memory& user_dw,
                               const memory::desc& want_md, Tensor& buffer) {
  if (!r) return user_dw;
  buffer = allocate_buffer(ctx, want_md);
  return make_memory(want_md, buffer);
}

void finish_weight_gradients(const std::optional<dnnl::reorder>& r, const memory& written, const memory& user_dw,
                             const Tensor& dw) {
  if (r) run_reorder("reorder of convolution weight gradients", *r, written, user_dw, dw);
}

}  // namespace tandem::backend::cpu
