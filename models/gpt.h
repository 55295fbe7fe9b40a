// GPT: GPT-2's architecture with nanoGPT's parameter names (transformer.wte, transformer.wpe,
// transformer.h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, transformer.ln_f,
// lm_head tied to transformer.wte), so a checkpoint loads into nanoGPT's GPT and back. Pre-LayerNorm
// (eps 1e-5, optional bias), exact GELU, causal attention scaled by 1/sqrt(head size), GPT-2's
// initialisation: N(0, 0.02) for linear and embedding weights, N(0, 0.02 / sqrt(2 n_layer)) for the
// residual projections (c_proj), zero biases.
#pragma once

#include <memory>
#include <vector>

#include "engine/nn/embedding.h"
#include "engine/nn/linear_head.h"
#include "engine/nn/transformer_layers.h"

namespace tandem::models {

using autograd::Variable;

// nanoGPT's GPTConfig.
struct GptConfig {
  int64_t block_size = 1024, vocab_size = 50304, n_layer = 12, n_head = 12, n_embd = 768;
  float dropout = 0.0f;
  bool bias = true;
};

// Keys and values of every layer for the positions generated so far: each new token costs one
// position of attention per layer instead of the whole prefix again.
struct KvCache {
  std::vector<Tensor> keys, values;  // per layer, (B, H, T, D)
  int64_t length() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].dim(2); }
};

class CausalSelfAttention : public nn::Module {
 public:
  explicit CausalSelfAttention(const GptConfig& c);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
  // With a cache: x holds only the new positions; their keys and values are appended to k and v.
  Variable forward(ExecutionContext& ctx, const Variable& x, Tensor* k, Tensor* v);

 private:
  int64_t n_head_;
  float dropout_;
  std::shared_ptr<nn::Linear> c_attn_, c_proj_;
  std::shared_ptr<nn::Dropout> resid_dropout_;
};

class GptBlock : public nn::Module {
 public:
  explicit GptBlock(const GptConfig& c);
  Variable forward(ExecutionContext& ctx, const Variable& x) override;
  Variable forward(ExecutionContext& ctx, const Variable& x, Tensor* k, Tensor* v);

 private:
  std::shared_ptr<nn::LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<nn::Module> mlp_;  // c_fc, gelu, c_proj, dropout
};

class Gpt : public nn::Module, public nn::LinearHead {
 public:
  explicit Gpt(const GptConfig& c);
  const GptConfig& config() const { return config_; }
  // (B, T) i64 token ids (a Variable without gradient), T <= block_size -> (B, T, vocab_size) logits.
  Variable forward(ExecutionContext& ctx, const Variable& tokens) override;
  // ln_f's output (B, T, n_embd), which lm_head turns into the logits; and lm_head's (tied) weight.
  Variable hidden_states(ExecutionContext& ctx, const Variable& tokens) override;
  const Variable& head_weight() const override { return lm_head_->weight(); }
  // The logits of new tokens (B, T_new) that follow the cache's positions; appends to the cache.
  Variable forward(ExecutionContext& ctx, const Tensor& tokens, KvCache& cache);

 private:
  Variable run(ExecutionContext& ctx, const Tensor& tokens, KvCache* cache);  // the hidden states
  GptConfig config_;
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Dropout> drop_;
  std::vector<std::shared_ptr<GptBlock>> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::Linear> lm_head_;
};

}  // namespace tandem::models
