// LayerNorm and GELU that keep bf16 activations (a transformer's, feeding linear layers): under
// precision: bf16 their output is stored in bf16, and since the next linear layer rounds its input to
// bf16 anyway, a chain through them gives the same loss and gradients bit for bit as without the
// flag; in an f32 context the flag changes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/nn/init.h"
#include "engine/nn/layers.h"
#include "engine/nn/transformer_layers.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::nn {
namespace {

using Grads = std::vector<std::vector<float>>;

Variable input() {
  std::vector<float> x(3 * 5 * 16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.61f * static_cast<float>(i));
  return Variable(Tensor::from_vector(x, {3, 5, 16}), true);
}

// linear -> `middle` -> linear, summed: the middle layer's output dtype, the loss and every gradient.
Grads run(ExecutionContext& ctx, Module& middle, Linear& first, Linear& last, DType expected) {
  const std::vector<Module*> modules{&first, &last, &middle};
  for (Module* m : modules) {
    for (auto& [name, p] : m->named_parameters()) p.zero_grad();
  }
  Variable x = input();
  Variable h = middle.forward(ctx, first.forward(ctx, x));
  EXPECT_EQ(h.value().dtype(), expected);
  Variable loss = autograd::sum(ctx, autograd::mul(ctx, last.forward(ctx, h), last.forward(ctx, h)));
  loss.backward(&ctx);
  Grads out{loss.value().to_vector(), x.grad().to_vector()};
  for (Module* m : modules) {
    for (auto& [name, p] : m->named_parameters()) out.push_back(p.grad().to_vector());
  }
  return out;
}

template <typename Layer>
void expect_same_bits_with_the_flag(Layer& plain, Layer& kept) {
  ExecutionContext& ctx = tandem::testing::bf16_cpu_context();
  init::manual_seed(3);
  Linear first(16, 16), last(16, 8);
  kept.keep_bf16_activations(true);
  EXPECT_EQ(run(ctx, kept, first, last, DType::kBF16), run(ctx, plain, first, last, DType::kF32));
  ExecutionContext f32(Device::cpu(), 2, 1);
  EXPECT_EQ(run(f32, kept, first, last, DType::kF32), run(f32, plain, first, last, DType::kF32));
}

TEST(Bf16TransformerLayers, LayerNormKeepingBf16ChangesNoBitOfALinearChain) {
  TANDEM_REQUIRE_BF16_CPU();
  LayerNorm plain(16), kept(16);
  init::manual_seed(5);
  for (auto& [name, p] : plain.named_parameters()) init::uniform(p.value(), 0.5f);  // not 1 and 0
  kept.load_state_dict(plain.state_dict());
  expect_same_bits_with_the_flag(plain, kept);
}

TEST(Bf16TransformerLayers, GeluKeepingBf16ChangesNoBitOfALinearChain) {
  TANDEM_REQUIRE_BF16_CPU();
  GELU plain, kept;
  expect_same_bits_with_the_flag(plain, kept);
  GELU tanh_plain("tanh"), tanh_kept("tanh");
  expect_same_bits_with_the_flag(tanh_plain, tanh_kept);
}

}  // namespace
}  // namespace tandem::nn
