// Differentiable ops of the transformer: layer_norm, matmul and linear on any leading dimensions,
// scaled_dot_product_attention (memory-efficient: the backward recomputes the probabilities), the
// same on a packed q/k/v projection (packed_self_attention) and embedding, with PyTorch's semantics.
#include <cmath>
#include <limits>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/autograd/trace.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {

Variable layer_norm(ExecutionContext& ctx, const Variable& x, int normalized_dims, const Variable& weight,
                    const Variable& bias, float eps, bool bf16_output) {
  Tensor w = weight.defined() ? weight.value() : Tensor(), b = bias.defined() ? bias.value() : Tensor();
  // bf16_output: y written in bf16 at once where the device keeps bf16 activations.
  backend::LayerNormForward f = backend::layer_norm_forward(ctx, x.value(), normalized_dims, w, b, eps, bf16_output);
  std::vector<Variable> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  Tensor xv = x.value(), mean = f.mean, var = f.var;
  const bool with_weight = weight.defined(), with_bias = bias.defined();
  if (tracing()) {
    trace_attributes("layer_norm", {{"normalized_dims", int64_t{normalized_dims}}, {"eps", double{eps}},
                                    {"with_weight", int64_t{with_weight}}, {"with_bias", int64_t{with_bias}}});
  }
  return make_op("layer_norm", std::move(f.y), std::move(inputs),
                 [&ctx, xv, w, mean, var, eps, with_weight, with_bias](const Tensor& dy) {
                   backend::LayerNormGrads g = backend::layer_norm_backward(ctx, xv, dy, w, with_bias, mean, var, eps);
                   std::vector<Tensor> grads{std::move(g.dx)};
                   if (with_weight) grads.push_back(std::move(g.dweight));
                   if (with_bias) grads.push_back(std::move(g.dbias));
                   return grads;
                 });
}

Variable matmul(ExecutionContext& ctx, const Variable& a, const Variable& b) {
  Tensor av = a.value(), bv = b.value();
  Tensor c = backend::matmul_nd(ctx, av, bv);
  bool need_da = a.requires_grad(), need_db = b.requires_grad();
  return make_op("matmul", std::move(c), {a, b}, [&ctx, av, bv, need_da, need_db](const Tensor& dc) {
    // c = a b: da = dc b^T, db = a^T dc, each summed over the batch dimensions its operand broadcast.
    Tensor da, db;
    if (need_da) da = backend::sum_to(ctx, backend::matmul_nd(ctx, dc, bv, false, true), av.shape());
    if (need_db) db = backend::sum_to(ctx, backend::matmul_nd(ctx, av, dc, true, false), bv.shape());
    return std::vector<Tensor>{da, db};
  });
}

namespace {

// Under bf16 autocast (where the device takes bf16 operands) x and dy are rounded once for the
// layer's passes, as a convolution's are; x's bf16 copy is what the weight gradient keeps. The
// weight's bf16 shadow serves both of its products (rounded by the optimizer's last update).
Variable linear_2d(ExecutionContext& ctx, const Variable& x, const Variable& w, const Variable& b, bool bf16_output) {
  Tensor bias = b.defined() ? b.value() : Tensor();
  Tensor xv = backend::bf16_operand(ctx, x.value()), wv = backend::bf16_weight(ctx, w.value());
  Tensor y = backend::linear_forward(ctx, xv, wv, bias, bf16_output);
  std::vector<Variable> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  bool need_dx = x.requires_grad(), with_bias = b.defined();
  return make_op("linear", std::move(y), std::move(inputs), [&ctx, xv, wv, need_dx, with_bias](const Tensor& dy_f32) {
    const Tensor dy = backend::bf16_operand(ctx, dy_f32);
    std::vector<Tensor> grads;
    grads.push_back(need_dx ? backend::linear_backward_data(ctx, dy, wv) : Tensor());
    backend::LinearWeightGrads g = backend::linear_backward_weights(ctx, xv, dy, with_bias);
    grads.push_back(std::move(g.dw));
    if (with_bias) grads.push_back(std::move(g.db));
    return grads;
  });
}

}  // namespace

Variable linear(ExecutionContext& ctx, const Variable& x, const Variable& w, const Variable& b, bool bf16_output) {
  const Shape s = x.shape();
  if (s.rank() == 2) return linear_2d(ctx, x, w, b, bf16_output);
  TANDEM_CHECK(s.rank() >= 1, ErrorCode::kInvalidArgument, "linear: x must have a feature dimension, got {}",
               x.value().describe());
  // Leading dimensions fold into rows and unfold after: (N..., in) -> (rows, in) -> (N..., out).
  const int64_t in = s[s.rank() - 1], rows = in > 0 ? s.numel() / in : 0;
  Variable y = linear_2d(ctx, reshape(ctx, x, Shape{rows, in}), w, b, bf16_output);
  std::vector<int64_t> out(s.dims().begin(), s.dims().end());
  out.back() = w.shape()[0];
  return reshape(ctx, y, Shape(std::span<const int64_t>(out)));
}

namespace {

// The additive f32 mask of (B or 1, H or 1, Tq, Tk) from PyTorch's attn_mask: a u8 (bool) mask
// whose true entries take part becomes 0 there and -inf elsewhere; an f32 one is added as given.
Tensor additive_mask(ExecutionContext& ctx, const Tensor& mask) {
  if (!mask.defined()) return mask;
  Tensor m = backend::contiguous(ctx, mask);
  if (m.rank() < 4) {
    std::vector<int64_t> dims(static_cast<size_t>(4 - m.rank()), 1);
    dims.insert(dims.end(), m.shape().dims().begin(), m.shape().dims().end());
    m = m.reshape(Shape(std::span<const int64_t>(dims)));
  }
  if (m.dtype() != DType::kU8) return m;
  Tensor blocked = Tensor::empty(m.shape(), DType::kF32, ctx.device());
  backend::fill(ctx, -std::numeric_limits<float>::infinity(), blocked);
  return backend::masked_fill(ctx, blocked, m, 0.0f);
}

}  // namespace

Variable scaled_dot_product_attention(ExecutionContext& ctx, const Variable& q, const Variable& k, const Variable& v,
                                      const Tensor& attn_mask, float dropout_p, bool is_causal,
                                      std::optional<float> scale) {
  backend::AttentionParams p;
  const int64_t d = q.shape().rank() == 4 ? q.shape()[3] : 0;
  p.scale = scale ? *scale : (d > 0 ? 1.0f / std::sqrt(static_cast<float>(d)) : 1.0f);
  p.causal = is_causal;
  p.dropout_p = dropout_p;  // as F.scaled_dot_product_attention: the caller passes 0 in eval mode
  p.dropout_seed = dropout_p > 0.0f ? ctx.generator().next_u64() : 0;
  Tensor mask = additive_mask(ctx, attn_mask);
  backend::AttentionForward f = backend::attention_forward(ctx, p, q.value(), k.value(), v.value(), mask);
  Tensor qv = q.value(), kv = k.value(), vv = v.value(), y = f.y, lse = f.lse;
  if (tracing()) {
    trace_attributes("scaled_dot_product_attention", {{"scale", double{p.scale}}, {"causal", int64_t{p.causal}},
                                                      {"dropout_p", double{dropout_p}}, {"mask", attn_mask}});
  }
  return make_op("scaled_dot_product_attention", std::move(f.y), {q, k, v},
                 [&ctx, p, qv, kv, vv, mask, y, lse](const Tensor& dy) {
                   backend::AttentionGrads g = backend::attention_backward(ctx, p, qv, kv, vv, mask, y, lse,
                                                                           backend::contiguous(ctx, dy));
                   return std::vector<Tensor>{std::move(g.dq), std::move(g.dk), std::move(g.dv)};
                 });
}

Variable packed_self_attention(ExecutionContext& ctx, const Variable& qkv, int64_t heads, float dropout_p,
                               bool is_causal, std::optional<float> scale, bool bf16_output) {
  backend::AttentionParams p;
  const Shape s = qkv.shape();
  const int64_t d = s.rank() == 3 && heads > 0 ? s[2] / (3 * heads) : 0;  // the backend checks the rest
  p.scale = scale ? *scale : (d > 0 ? 1.0f / std::sqrt(static_cast<float>(d)) : 1.0f);
  p.causal = is_causal;
  p.dropout_p = dropout_p;
  // Drawn as scaled_dot_product_attention draws it, so a model moved onto this op keeps its stream.
  p.dropout_seed = dropout_p > 0.0f ? ctx.generator().next_u64() : 0;
  backend::AttentionForward f = backend::packed_attention_forward(ctx, p, heads, qkv.value(), bf16_output);
  Tensor qkvv = qkv.value(), y = f.y, lse = f.lse;
  if (tracing()) {
    trace_attributes("packed_self_attention", {{"heads", heads}, {"scale", double{p.scale}},
                                               {"causal", int64_t{p.causal}}, {"dropout_p", double{dropout_p}}});
  }
  return make_op("packed_self_attention", std::move(f.y), {qkv}, [&ctx, p, heads, qkvv, y, lse](const Tensor& dy) {
    return std::vector<Tensor>{
        backend::packed_attention_backward(ctx, p, heads, qkvv, y, lse, backend::contiguous(ctx, dy))};
  });
}

Variable embedding(ExecutionContext& ctx, const Variable& weight, const Tensor& ids) {
  Tensor y = backend::embedding_forward(ctx, weight.value(), ids);
  const int64_t rows = weight.shape()[0];
  if (tracing()) trace_attributes("embedding", {{"ids", ids}});
  return make_op("embedding", std::move(y), {weight}, [&ctx, ids, rows](const Tensor& dy) {
    return std::vector<Tensor>{backend::embedding_backward(ctx, ids, backend::contiguous(ctx, dy), rows)};
  });
}

}  // namespace tandem::autograd
