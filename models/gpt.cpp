#include "models/gpt.h"

#include <cmath>
#include <string>

#include "engine/backend/ops.h"
#include "engine/nn/init.h"

namespace tandem::models {
namespace {

// nanoGPT's ModuleDict / ModuleList containers: named children only, never called as a whole.
class Container : public nn::Module {
 public:
  Variable forward(ExecutionContext&, const Variable&) override {
    throw_error(ErrorCode::kFailedPrecondition, "a GPT container module is not called on its own");
  }
  template <typename M>
  std::shared_ptr<M> add(const std::string& name, std::shared_ptr<M> m) {
    return register_module(name, std::move(m));
  }
};

// nanoGPT's MLP: c_fc, gelu, c_proj, dropout (named, as its state_dict has them).
class GptMlp : public nn::Module {
 public:
  explicit GptMlp(const GptConfig& c) {
    c_fc_ = register_module("c_fc", std::make_shared<nn::Linear>(c.n_embd, 4 * c.n_embd, c.bias));
    gelu_ = register_module("gelu", std::make_shared<nn::GELU>());
    c_fc_->keep_bf16_activations(true);  // it feeds the GELU alone, which reads bf16
    gelu_->keep_bf16_activations(true);  // it feeds c_proj alone (docs/PRECISION.md)
    c_proj_ = register_module("c_proj", std::make_shared<nn::Linear>(4 * c.n_embd, c.n_embd, c.bias));
    dropout_ = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
  }
  Variable forward(ExecutionContext& ctx, const Variable& x) override {
    return dropout_->forward(ctx, c_proj_->forward(ctx, gelu_->forward(ctx, c_fc_->forward(ctx, x))));
  }

 private:
  std::shared_ptr<nn::Linear> c_fc_, c_proj_;
  std::shared_ptr<nn::GELU> gelu_;
  std::shared_ptr<nn::Dropout> dropout_;
};

void normal_weights(nn::Module& m, float std) {
  for (auto& [name, p] : m.named_parameters()) {
    if (name.ends_with("weight") && p.shape().rank() == 2) nn::init::normal(p.value(), std);
    if (name.ends_with("bias")) p.value().zero_();
  }
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GptConfig& c) : n_head_(c.n_head), dropout_(c.dropout) {
  c_attn_ = register_module("c_attn", std::make_shared<nn::Linear>(c.n_embd, 3 * c.n_embd, c.bias));
  c_proj_ = register_module("c_proj", std::make_shared<nn::Linear>(c.n_embd, c.n_embd, c.bias));
  resid_dropout_ = register_module("resid_dropout", std::make_shared<nn::Dropout>(c.dropout));
}

Variable CausalSelfAttention::forward(ExecutionContext& ctx, const Variable& x) { return forward(ctx, x, nullptr, nullptr); }

Variable CausalSelfAttention::forward(ExecutionContext& ctx, const Variable& x, Tensor* k_cache, Tensor* v_cache) {
  const Shape s = x.shape();
  const int64_t b = s[0], t = s[1], c = s[2], h = n_head_, d = c / h;
  const float p = is_training() ? dropout_ : 0.0f;
  if (k_cache == nullptr) {  // training and evaluation: the heads split and merge inside the op
    // Under precision: bf16, q, k, v and y are stored in bf16 (autocast's dtypes): attention and c_proj
    // round them anyway, so the f32 copies would only cost memory and casts.
    Variable qkv = autograd::linear(ctx, x, c_attn_->weight(), c_attn_->bias(), true);  // (B, T, 3C)
    Variable y = autograd::packed_self_attention(ctx, qkv, h, p, true, std::nullopt, true);  // (B, T, C)
    return resid_dropout_->forward(ctx, c_proj_->forward(ctx, y));
  }
  Variable qkv = c_attn_->forward(ctx, x);  // (B, T, 3C)
  const int perm[] = {2, 0, 3, 1, 4};  // (B, T, 3, H, D) -> (3, B, H, T, D)
  Variable heads = autograd::permute(ctx, autograd::reshape(ctx, qkv, Shape{b, t, 3, h, d}), perm);
  std::vector<Variable> parts = autograd::split(ctx, heads, 1, 0);
  auto head = [&](const Variable& v) { return autograd::reshape(ctx, v, Shape{b, h, t, d}); };
  Variable q = head(parts[0]), k = head(parts[1]), v = head(parts[2]);
  // Generation runs without gradients: the cache holds plain tensors, grown by one concat a step.
  if (k_cache->defined()) {
    const Tensor ks[] = {*k_cache, k.value()}, vs[] = {*v_cache, v.value()};
    *k_cache = backend::concat(ctx, ks, 2);
    *v_cache = backend::concat(ctx, vs, 2);
  } else {
    *k_cache = k.value();
    *v_cache = v.value();
  }
  k = Variable(*k_cache);
  v = Variable(*v_cache);
  Variable y = autograd::scaled_dot_product_attention(ctx, q, k, v, {}, p, true);
  const int back[] = {0, 2, 1, 3};  // (B, H, T, D) -> (B, T, H, D)
  Variable merged = autograd::reshape(ctx, autograd::permute(ctx, y, back), Shape{b, t, c});
  return resid_dropout_->forward(ctx, c_proj_->forward(ctx, merged));
}

GptBlock::GptBlock(const GptConfig& c) {
  ln_1_ = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.n_embd, 1e-5f, true, c.bias));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(c));
  ln_2_ = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.n_embd, 1e-5f, true, c.bias));
  mlp_ = register_module("mlp", std::make_shared<GptMlp>(c));
  // Each norm feeds one linear layer alone (c_attn, c_fc): bf16 under precision: bf16.
  ln_1_->keep_bf16_activations(true);
  ln_2_->keep_bf16_activations(true);
}

Variable GptBlock::forward(ExecutionContext& ctx, const Variable& x) { return forward(ctx, x, nullptr, nullptr); }

Variable GptBlock::forward(ExecutionContext& ctx, const Variable& x, Tensor* k, Tensor* v) {
  Variable y = autograd::add(ctx, x, attn_->forward(ctx, ln_1_->forward(ctx, x), k, v));
  return autograd::add(ctx, y, mlp_->forward(ctx, ln_2_->forward(ctx, y)));
}

Gpt::Gpt(const GptConfig& c) : config_(c) {
  TANDEM_CHECK(c.block_size > 0 && c.vocab_size > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_embd % c.n_head == 0,
               ErrorCode::kInvalidArgument,
               "gpt: block_size {}, vocab_size {}, n_layer {} and n_head {} must be positive, and n_embd {} a "
               "multiple of n_head",
               c.block_size, c.vocab_size, c.n_layer, c.n_head, c.n_embd);
  TANDEM_CHECK(c.dropout >= 0.0f && c.dropout < 1.0f, ErrorCode::kInvalidArgument,
               "gpt: dropout must be in [0, 1), got {}", c.dropout);
  auto transformer = register_module("transformer", std::make_shared<Container>());
  wte_ = transformer->add("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd));
  wpe_ = transformer->add("wpe", std::make_shared<nn::Embedding>(c.block_size, c.n_embd));
  drop_ = transformer->add("drop", std::make_shared<nn::Dropout>(c.dropout));
  auto h = transformer->add("h", std::make_shared<Container>());
  for (int64_t i = 0; i < c.n_layer; ++i) blocks_.push_back(h->add(std::to_string(i), std::make_shared<GptBlock>(c)));
  ln_f_ = transformer->add("ln_f", std::make_shared<nn::LayerNorm>(c.n_embd, 1e-5f, true, c.bias));
  ln_f_->keep_bf16_activations(true);  // it feeds lm_head alone
  lm_head_ = register_module("lm_head", std::make_shared<nn::Linear>(c.n_embd, c.vocab_size, false));
  // nanoGPT: self.transformer.wte.weight = self.lm_head.weight (one tensor, both names).
  for (auto& [name, p] : lm_head_->named_parameters()) wte_->tie_parameter("weight", p);
  normal_weights(*this, 0.02f);
  const float residual_std = 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer));
  for (auto& [name, p] : named_parameters()) {
    if (name.ends_with("c_proj.weight")) nn::init::normal(p.value(), residual_std);
  }
}

Variable Gpt::forward(ExecutionContext& ctx, const Variable& tokens) {
  return lm_head_->forward(ctx, run(ctx, tokens.value(), nullptr));
}

Variable Gpt::hidden_states(ExecutionContext& ctx, const Variable& tokens) { return run(ctx, tokens.value(), nullptr); }

Variable Gpt::forward(ExecutionContext& ctx, const Tensor& tokens, KvCache& cache) {
  if (cache.keys.empty()) {
    cache.keys.resize(blocks_.size());
    cache.values.resize(blocks_.size());
  }
  return lm_head_->forward(ctx, run(ctx, tokens, &cache));
}

Variable Gpt::run(ExecutionContext& ctx, const Tensor& tokens, KvCache* cache) {
  TANDEM_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::kI64, ErrorCode::kInvalidArgument,
               "gpt: takes (B, T) i64 token ids, got {}", tokens.describe());
  const int64_t past = cache != nullptr ? cache->length() : 0, t = tokens.dim(1);
  TANDEM_CHECK(past + t <= config_.block_size, ErrorCode::kInvalidArgument,
               "gpt: {} positions ({} cached + {} new) exceed block_size {}", past + t, past, t, config_.block_size);
  Variable x = wte_->forward(ctx, Variable(tokens));
  // Positions past..past+t-1: a window of wpe's rows, broadcast over the batch.
  Variable pos = autograd::narrow(ctx, wpe_->weight(), 0, past, t);
  x = drop_->forward(ctx, autograd::add(ctx, x, pos));
  for (size_t i = 0; i < blocks_.size(); ++i) {
    x = cache != nullptr ? blocks_[i]->forward(ctx, x, &cache->keys[i], &cache->values[i]) : blocks_[i]->forward(ctx, x);
  }
  return ln_f_->forward(ctx, x);
}

}  // namespace tandem::models
