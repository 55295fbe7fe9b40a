// A decoder-only transformer written as with libtorch (the model is 39 non-blank lines between the
// markers): token and position embeddings, pre-norm blocks of RMSNorm, causal self-attention on a
// packed q/k/v projection and a SiLU MLP, in a ModuleList, then a final RMSNorm and the vocabulary
// head. It learns to continue sequences that repeat their first 4 tokens, which only attention can
// do, and returns 0 when the loss on the predictable positions has fallen below a tenth of chance's.
//   mini_gpt [STEPS]
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include <tandem/nn.h>
#include <tandem/ops.h>
#include <tandem/optim.h>

namespace {

using tandem::ExecutionContext;
using tandem::autograd::Variable;
namespace ag = tandem::autograd;
namespace nn = tandem::nn;

// ---- model ----
class Block : public nn::Module {
 public:
  Block(int64_t dim, int64_t heads) : heads_(heads) {
    norm1_ = register_module("norm1", std::make_shared<nn::RMSNorm>(dim));
    qkv_ = register_module("qkv", std::make_shared<nn::Linear>(dim, 3 * dim));
    proj_ = register_module("proj", std::make_shared<nn::Linear>(dim, dim));
    norm2_ = register_module("norm2", std::make_shared<nn::RMSNorm>(dim));
    up_ = register_module("up", std::make_shared<nn::Linear>(dim, 4 * dim));
    down_ = register_module("down", std::make_shared<nn::Linear>(4 * dim, dim));
  }
  Variable forward(ExecutionContext& ctx, const Variable& x) override {
    Variable att = ag::packed_self_attention(ctx, (*qkv_)(ctx, (*norm1_)(ctx, x)), heads_, 0.0f, /*is_causal=*/true);
    Variable h = ag::add(ctx, x, (*proj_)(ctx, att));
    return ag::add(ctx, h, (*down_)(ctx, ag::silu(ctx, (*up_)(ctx, (*norm2_)(ctx, h)))));
  }

 private:
  int64_t heads_;
  std::shared_ptr<nn::Module> norm1_, qkv_, proj_, norm2_, up_, down_;
};

class MiniGpt : public nn::Module {
 public:
  MiniGpt(int64_t vocab, int64_t max_len, int64_t dim, int64_t heads, int layers) {
    tokens_ = register_module("tokens", std::make_shared<nn::Embedding>(vocab, dim));
    positions_ = register_module("positions", std::make_shared<nn::Embedding>(max_len, dim));
    blocks_ = register_module("blocks", std::make_shared<nn::ModuleList>());
    for (int i = 0; i < layers; ++i) blocks_->push_back(std::make_shared<Block>(dim, heads));
    norm_ = register_module("norm", std::make_shared<nn::RMSNorm>(dim));
    head_ = register_module("head", std::make_shared<nn::Linear>(dim, vocab, /*bias=*/false));
  }
  Variable forward(ExecutionContext& ctx, const Variable& ids) override {  // (B, T) i64 -> (B, T, vocab)
    Variable where(tandem::backend::arange(ctx, ids.shape()[1]));
    Variable h = ag::add(ctx, (*tokens_)(ctx, ids), (*positions_)(ctx, where));
    for (const auto& block : *blocks_) h = block->forward(ctx, h);
    return (*head_)(ctx, (*norm_)(ctx, h));
  }

 private:
  std::shared_ptr<nn::Module> tokens_, positions_, norm_, head_;
  std::shared_ptr<nn::ModuleList> blocks_;
};
// ---- end of model ----

constexpr int64_t kVocab = 16, kLen = 16, kBatch = 32, kPeriod = 4, kIgnore = -100;

// Sequences whose tokens repeat with period 4: inputs are the first kLen tokens, targets the next
// ones, ignored where they cannot be known yet (the first period).
void draw(std::mt19937& rng, tandem::Tensor& inputs, tandem::Tensor& targets) {
  std::uniform_int_distribution<int64_t> token(0, kVocab - 1);
  for (int64_t b = 0; b < kBatch; ++b) {
    int64_t seq[kLen + 1];
    for (int64_t t = 0; t <= kLen; ++t) seq[t] = t < kPeriod ? token(rng) : seq[t - kPeriod];
    for (int64_t t = 0; t < kLen; ++t) {
      inputs.data<int64_t>()[b * kLen + t] = seq[t];
      targets.data<int64_t>()[b * kLen + t] = t + 1 < kPeriod ? kIgnore : seq[t + 1];
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 150;
  try {
    ExecutionContext ctx(tandem::Device::cpu(), /*threads=*/2, /*seed=*/1);
    tandem::nn::init::manual_seed(5);
    MiniGpt model(kVocab, kLen, /*dim=*/32, /*heads=*/4, /*layers=*/2);
    auto optimizer = tandem::optim::make_optimizer(model.named_parameters(), {.name = "adamw", .lr = 3e-3f});
    std::mt19937 rng(11);
    tandem::Tensor inputs = tandem::Tensor::empty({kBatch, kLen}, tandem::DType::kI64);
    tandem::Tensor targets = tandem::Tensor::empty({kBatch * kLen}, tandem::DType::kI64);
    const double known = kBatch * (kLen - (kPeriod - 1));  // targets that count
    double first = 0.0, last = 0.0;
    for (int step = 0; step < steps; ++step) {
      draw(rng, inputs, targets);
      optimizer->zero_grad();
      Variable logits = ag::reshape(ctx, model.forward(ctx, Variable(inputs)), {kBatch * kLen, kVocab});
      Variable loss = ag::scale(ctx, ag::sum(ctx, ag::softmax_cross_entropy(ctx, logits, targets, 0.0f, kIgnore)),
                                static_cast<float>(1.0 / known));
      loss.backward(&ctx);
      optimizer->step(ctx);
      last = loss.item();
      if (step == 0) first = last;
    }
    std::printf("loss: %.4f -> %.4f over %d steps (chance: %.4f)\n", first, last, steps, std::log(double(kVocab)));
    const bool ok = last < 0.1 * std::log(double(kVocab));
    std::printf("%s: the loss on the repeated tokens fell below a tenth of chance's\n", ok ? "ok" : "FAIL");
    std::printf("done\n");
    return ok ? 0 : 1;
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
