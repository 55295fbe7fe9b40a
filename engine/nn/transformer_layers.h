// The transformer's layers with PyTorch's constructor arguments and parameter names, so that a
// checkpoint moves between Tandem and PyTorch without renaming: LayerNorm, GELU,
// MultiheadAttention (in_proj_weight, in_proj_bias, out_proj) and TransformerEncoderLayer.
// Sequences are batch-first, (N, T, E), as PyTorch with batch_first=True.
#pragma once

#include <memory>
#include <string>

#include "engine/nn/layers.h"

namespace tandem::nn {

class LayerNorm : public Module {
 public:
  // Over the last dimension of size normalized_shape; weight (ones) and bias (zeros) unless
  // elementwise_affine is false; bias false keeps the weight only (nanoGPT's LayerNorm(bias=False)).
  explicit LayerNorm(int64_t normalized_shape, float eps = 1e-5f, bool elementwise_affine = true, bool bias = true);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
  // Under precision: bf16, on a device that takes bf16 operands, the output is stored in bf16 (the
  // f32 one freed at once): for a norm whose output goes to linear layers alone (a transformer
  // block's), which round their input to bf16 anyway. Off by default; the backward is unchanged.
  void keep_bf16_activations(bool on) { bf16_output_ = on; }

 private:
  float eps_;
  bool bf16_output_ = false;
  Variable weight_, bias_;
};

class GELU : public Module {
 public:
  explicit GELU(const std::string& approximate = "none");  // "none" (erf) or "tanh"
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
  // As LayerNorm's: for a GELU whose output goes to a linear layer alone (an MLP's).
  void keep_bf16_activations(bool on) { bf16_output_ = on; }

 private:
  bool tanh_;
  bool bf16_output_ = false;
};

struct MultiheadAttentionOptions {
  int64_t embed_dim = 0, num_heads = 1;
  float dropout = 0.0f;  // on the attention probabilities, in training mode
  bool bias = true;
};

// Self-attention (query = key = value = x) as torch.nn.MultiheadAttention(batch_first=True) computes
// it: one (3E, E) input projection, heads of E / num_heads, scaled_dot_product_attention, out_proj.
class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& options);
  // (N, T, E) -> (N, T, E); attn_mask u8 (true takes part) or f32 (added), (T, T) or broadcastable
  // to (N, heads, T, T).
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
  Variable forward(ExecutionContext& ctx, const Variable& x, const Tensor& attn_mask, bool is_causal);

 private:
  MultiheadAttentionOptions options_;
  Variable in_proj_weight_, in_proj_bias_;
  std::shared_ptr<Linear> out_proj_;
};

struct TransformerEncoderLayerOptions {
  int64_t d_model = 0, nhead = 1, dim_feedforward = 2048;
  float dropout = 0.1f;
  std::string activation = "relu";  // relu or gelu
  float layer_norm_eps = 1e-5f;
  bool norm_first = false;
  bool bias = true;
};

// torch.nn.TransformerEncoderLayer(batch_first=True): self_attn, linear1, dropout, linear2, norm1,
// norm2, dropout1, dropout2, post-norm unless norm_first.
class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerEncoderLayerOptions& options);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;

 private:
  Variable feed_forward(ExecutionContext& ctx, const Variable& x);
  TransformerEncoderLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<Dropout> dropout_, dropout1_, dropout2_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
};

}  // namespace tandem::nn
