// A module whose forward takes two inputs (a cross-attention block: queries from x, keys and values
// from memory), as a libtorch user writes one: its owner calls that forward, gradients reach both
// inputs and its parameters, and the one-input forward it does not define is a FailedPrecondition
// that names its type.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/autograd/ops.h"
#include "engine/nn/init.h"
#include "engine/nn/layers.h"
#include "engine/nn/transformer_layers.h"

namespace tandem::nn {
namespace {

class CrossAttention : public Module {
 public:
  explicit CrossAttention(int64_t dim) {
    q_ = register_module("q", std::make_shared<Linear>(dim, dim));
    kv_ = register_module("kv", std::make_shared<Linear>(dim, 2 * dim));
  }
  using Module::forward;
  Variable forward(ExecutionContext& ctx, const Variable& x, const Variable& memory) {
    const auto kv = autograd::chunk(ctx, kv_->forward(ctx, memory), 2, -1);
    const auto heads = [&](const Variable& t) { return autograd::reshape(ctx, t, {t.shape()[0], 1, t.shape()[1], -1}); };
    const Variable y = autograd::scaled_dot_product_attention(ctx, heads(q_->forward(ctx, x)), heads(kv[0]), heads(kv[1]));
    return autograd::reshape(ctx, y, x.shape());
  }

 private:
  std::shared_ptr<Linear> q_, kv_;
};

class Decoder : public Module {
 public:
  Decoder() { block_ = register_module("cross", std::make_shared<CrossAttention>(8)); }
  Variable forward(ExecutionContext& ctx, const Variable& x) override {
    return block_->forward(ctx, x, memory_);  // the owner calls the two-input forward
  }
  Variable memory_;

 private:
  std::shared_ptr<CrossAttention> block_;
};

Tensor random(const Shape& shape, uint64_t seed) {
  init::manual_seed(seed);
  Tensor t = Tensor::empty(shape);
  init::uniform(t, 1.0f);
  return t;
}

TEST(MultiInputModule, OwnerCallsTheTwoInputForwardAndGradientsReachBothInputs) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  Decoder decoder;
  EXPECT_EQ(decoder.named_parameters().size(), 4u);  // cross.q.{weight,bias}, cross.kv.{weight,bias}
  const Variable x(random({2, 5, 8}, 1), true);
  decoder.memory_ = Variable(random({2, 7, 8}, 2), true);
  Variable y = decoder(ctx, x);
  EXPECT_EQ(y.shape(), (Shape{2, 5, 8}));
  autograd::sum(ctx, autograd::mul(ctx, y, y)).backward(&ctx);
  EXPECT_TRUE(x.has_grad());
  EXPECT_TRUE(decoder.memory_.has_grad());
  for (const auto& [name, p] : decoder.named_parameters()) EXPECT_TRUE(p.has_grad()) << name;
}

TEST(MultiInputModule, ItsOneInputForwardIsAnErrorNamingItsType) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  CrossAttention block(8);
  Module& as_module = block;
  try {
    as_module(ctx, Variable(random({2, 5, 8}, 3)));
    ADD_FAILURE() << "a two-input module ran its one-input forward";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("tandem::nn::(anonymous namespace)::CrossAttention has no one-input forward"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::nn
