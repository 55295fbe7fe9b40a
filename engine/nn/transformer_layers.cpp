#include "engine/nn/transformer_layers.h"

#include <vector>

#include "engine/nn/init.h"

namespace tandem::nn {

LayerNorm::LayerNorm(int64_t normalized_shape, float eps, bool elementwise_affine, bool bias) : eps_(eps) {
  TANDEM_CHECK(normalized_shape > 0 && eps > 0.0f, ErrorCode::kInvalidArgument,
               "LayerNorm: normalized_shape {} and eps {} must be positive", normalized_shape, eps);
  if (!elementwise_affine) return;
  Tensor w = Tensor::empty({normalized_shape});
  init::constant(w, 1.0f);
  weight_ = register_parameter("weight", w);
  if (bias) bias_ = register_parameter("bias", Tensor::zeros({normalized_shape}));
}

Variable LayerNorm::forward(ExecutionContext& ctx, const Variable& x) {
  return autograd::layer_norm(ctx, x, 1, weight_, bias_, eps_, bf16_output_);
}

GELU::GELU(const std::string& approximate) : tanh_(approximate == "tanh") {
  TANDEM_CHECK(approximate == "none" || approximate == "tanh", ErrorCode::kInvalidArgument,
               "GELU: approximate must be 'none' or 'tanh', got '{}'", approximate);
}

Variable GELU::forward(ExecutionContext& ctx, const Variable& x) {
  return autograd::gelu(ctx, x, tanh_, bf16_output_);
}

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& options) : options_(options) {
  const int64_t e = options.embed_dim;
  TANDEM_CHECK(e > 0 && options.num_heads > 0 && e % options.num_heads == 0, ErrorCode::kInvalidArgument,
               "MultiheadAttention: embed_dim {} must be a positive multiple of num_heads {}", e, options.num_heads);
  TANDEM_CHECK(options.dropout >= 0.0f && options.dropout < 1.0f, ErrorCode::kInvalidArgument,
               "MultiheadAttention: dropout must be in [0, 1), got {}", options.dropout);
  // PyTorch's _reset_parameters: xavier_uniform_ in_proj_weight, zero biases, out_proj a Linear
  // with its default weights.
  Tensor w = Tensor::empty({3 * e, e});
  init::xavier_uniform(w);
  in_proj_weight_ = register_parameter("in_proj_weight", w);
  if (options.bias) in_proj_bias_ = register_parameter("in_proj_bias", Tensor::zeros({3 * e}));
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(e, e, options.bias));
  if (options.bias) {
    for (auto& [name, p] : out_proj_->named_parameters()) {
      if (name == "bias") p.value().zero_();
    }
  }
}

Variable MultiheadAttention::forward(ExecutionContext& ctx, const Variable& x) { return forward(ctx, x, {}, false); }

Variable MultiheadAttention::forward(ExecutionContext& ctx, const Variable& x, const Tensor& attn_mask,
                                     bool is_causal) {
  const Shape s = x.shape();
  TANDEM_CHECK(s.rank() == 3 && s[2] == options_.embed_dim, ErrorCode::kInvalidArgument,
               "MultiheadAttention: x must be (N, T, {}) (batch first), got {}", options_.embed_dim, s.str());
  const int64_t n = s[0], t = s[1], e = s[2], h = options_.num_heads, d = e / h;
  const float p = is_training() ? options_.dropout : 0.0f;
  if (!attn_mask.defined()) {  // the heads split and merge inside the op
    // Under precision: bf16, q, k, v and y are stored in bf16 (autocast's dtypes): attention and
    // out_proj round them anyway.
    Variable qkv = autograd::linear(ctx, x, in_proj_weight_, in_proj_bias_, true);  // (N, T, 3E)
    return out_proj_->forward(ctx, autograd::packed_self_attention(ctx, qkv, h, p, is_causal, std::nullopt, true));
  }
  Variable qkv = autograd::linear(ctx, x, in_proj_weight_, in_proj_bias_);  // (N, T, 3E)
  // (N, T, 3, H, D) -> (3, N, H, T, D): q, k and v each (N, H, T, D), contiguous.
  const int perm[] = {2, 0, 3, 1, 4};
  Variable heads = autograd::permute(ctx, autograd::reshape(ctx, qkv, Shape{n, t, 3, h, d}), perm);
  std::vector<Variable> parts = autograd::split(ctx, heads, 1, 0);
  auto head_view = [&](const Variable& v) { return autograd::reshape(ctx, v, Shape{n, h, t, d}); };
  Variable y = autograd::scaled_dot_product_attention(ctx, head_view(parts[0]), head_view(parts[1]),
                                                      head_view(parts[2]), attn_mask, p, is_causal);
  const int back[] = {0, 2, 1, 3};  // (N, H, T, D) -> (N, T, H, D)
  Variable merged = autograd::reshape(ctx, autograd::permute(ctx, y, back), Shape{n, t, e});
  return out_proj_->forward(ctx, merged);
}

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerEncoderLayerOptions& o) : options_(o) {
  TANDEM_CHECK(o.activation == "relu" || o.activation == "gelu", ErrorCode::kInvalidArgument,
               "TransformerEncoderLayer: activation must be relu or gelu, got '{}'", o.activation);
  self_attn_ = register_module("self_attn", std::make_shared<MultiheadAttention>(
                                                MultiheadAttentionOptions{o.d_model, o.nhead, o.dropout, o.bias}));
  linear1_ = register_module("linear1", std::make_shared<Linear>(o.d_model, o.dim_feedforward, o.bias));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(o.dropout));
  linear2_ = register_module("linear2", std::make_shared<Linear>(o.dim_feedforward, o.d_model, o.bias));
  norm1_ = register_module("norm1", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps, true, o.bias));
  norm2_ = register_module("norm2", std::make_shared<LayerNorm>(o.d_model, o.layer_norm_eps, true, o.bias));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(o.dropout));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(o.dropout));
}

Variable TransformerEncoderLayer::feed_forward(ExecutionContext& ctx, const Variable& x) {
  Variable h = linear1_->forward(ctx, x);
  h = options_.activation == "gelu" ? autograd::gelu(ctx, h) : autograd::relu(ctx, h);
  return dropout2_->forward(ctx, linear2_->forward(ctx, dropout_->forward(ctx, h)));
}

Variable TransformerEncoderLayer::forward(ExecutionContext& ctx, const Variable& x) {
  if (options_.norm_first) {
    Variable y = autograd::add(ctx, x, dropout1_->forward(ctx, self_attn_->forward(ctx, norm1_->forward(ctx, x))));
    return autograd::add(ctx, y, feed_forward(ctx, norm2_->forward(ctx, y)));
  }
  Variable y = norm1_->forward(ctx, autograd::add(ctx, x, dropout1_->forward(ctx, self_attn_->forward(ctx, x))));
  return norm2_->forward(ctx, autograd::add(ctx, y, feed_forward(ctx, y)));
}

}  // namespace tandem::nn
