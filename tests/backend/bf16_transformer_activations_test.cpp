// A transformer's attention activations kept in bf16 (precision: bf16 on the CPU): a linear layer
// asked for a bf16 output writes its f32 result, with the bias's bf16 shadow added, rounded once;
// packed self-attention reads a bf16 qkv as its widened values and writes y as the f32 result
// rounded, and its backward reads the bf16 y and qkv as their widened values; a unary op (the MLP's
// GELU) reads a bf16 x as its widened values and writes a bf16 y as its f32 result rounded, and so
// does layer norm its y (statistics f32). Bit for
// bit, so the GPU kernels (tests/cuda/attention_bf16_gpu_test.cpp, bf16_activations_gpu_test.cpp)
// have one contract to meet.
#include <gtest/gtest.h>

#include <cmath>

#include "backend_test_util.h"
#include "tests/backend/bf16_values.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::backend::testing {
namespace {

ExecutionContext& bf16_context() { return tandem::testing::bf16_cpu_context(); }

// f32 values that bf16 holds exactly: v rounded.
Tensor rounded_tensor(const Vec& v, const Shape& shape) { return widened(bf16_operand(bf16_context(), to_tensor(v, shape))); }

TEST(Bf16LinearOutput, IsTheF32ResultWithTheRoundedBiasRoundedOnce) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext& ctx = bf16_context();
  const int64_t n = 19, in = 40, out = 24;
  const Tensor x = to_tensor(random_vec(static_cast<size_t>(n * in), 1), {n, in});
  const Tensor w = to_tensor(random_vec(static_cast<size_t>(out * in), 2), {out, in});
  const Vec bias = random_vec(static_cast<size_t>(out), 3, -3.0, 3.0);
  const Tensor b = to_tensor(bias, {out});
  Tensor y = linear_forward(ctx, x, w, b, true);
  expect_rounding_of(y, linear_forward(ctx, x, w, rounded_tensor(bias, {out})), "with a bias");
  expect_rounding_of(linear_forward(ctx, x, w, {}, true), linear_forward(ctx, x, w), "without a bias");
  // No input features: every row is the bias, rounded.
  const Tensor none = Tensor::zeros({n, 0}), w0 = Tensor::zeros({out, 0});
  expect_rounding_of(linear_forward(ctx, none, w0, b, true), linear_forward(ctx, none, w0, b), "no features");
  // The bias's master stays f32; only its shadow is bf16.
  EXPECT_EQ(b.dtype(), DType::kF32);
  EXPECT_EQ(b.to_vector(), to_tensor(bias, {out}).to_vector());
}

TEST(Bf16LinearOutput, AnF32ContextIgnoresTheFlag) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  const Tensor x = to_tensor(random_vec(6 * 5, 4), {6, 5}), w = to_tensor(random_vec(3 * 5, 5), {3, 5});
  const Tensor b = to_tensor(random_vec(3, 6), {3});
  Tensor y = linear_forward(ctx, x, w, b, true);
  EXPECT_EQ(y.dtype(), DType::kF32);
  EXPECT_EQ(y.to_vector(), linear_forward(ctx, x, w, b).to_vector());
  EXPECT_EQ(packed_attention_forward(ctx, AttentionParams{.scale = 0.5f}, 2, Tensor::zeros({1, 3, 12}), true).y.dtype(),
            DType::kF32);
}

TEST(Bf16PackedAttention, ReadsABf16QkvAsItsWidenedValuesAndWritesTheRoundedY) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext& ctx = bf16_context();
  const int64_t b = 2, t = 29, h = 3, d = 16, c = h * d;
  for (bool causal : {false, true}) {
    for (float dropout : {0.0f, 0.2f}) {
      SCOPED_TRACE(::testing::Message() << "causal " << causal << " dropout " << dropout);
      const AttentionParams p{.scale = 0.25f, .causal = causal, .dropout_p = dropout, .dropout_seed = 77};
      const Tensor qkv16 = bf16_operand(ctx, to_tensor(random_vec(static_cast<size_t>(b * t * 3 * c), 7, -2, 2),
                                                       {b, t, 3 * c}));
      const Tensor qkv = widened(qkv16);
      const Tensor dy = to_tensor(random_vec(static_cast<size_t>(b * t * c), 8), {b, t, c});
      const AttentionForward want = packed_attention_forward(ctx, p, h, qkv);
      const AttentionForward got = packed_attention_forward(ctx, p, h, qkv16, true);
      expect_rounding_of(got.y, want.y, "y");
      EXPECT_EQ(got.lse.to_vector(), want.lse.to_vector());
      const AttentionForward f32_y = packed_attention_forward(ctx, p, h, qkv16);  // bf16 in, f32 out
      EXPECT_EQ(f32_y.y.dtype(), DType::kF32);
      EXPECT_EQ(f32_y.y.to_vector(), want.y.to_vector());

      const Tensor dqkv = packed_attention_backward(ctx, p, h, qkv16, got.y, got.lse, dy);
      EXPECT_EQ(dqkv.dtype(), DType::kF32);
      EXPECT_EQ(dqkv.to_vector(), packed_attention_backward(ctx, p, h, qkv, widened(got.y), got.lse, dy).to_vector());
    }
  }
}

// No bf16 product runs here, so this holds on CPUs without AVX-512 too (the conversions are ours).
TEST(Bf16Unary, ReadsABf16XAsItsWidenedValuesAndWritesTheRoundedY) {
  ExecutionContext& ctx = bf16_context();
  const Shape shape{7, 3, 50};
  const Tensor x16 = bf16_operand(ctx, to_tensor(random_vec(static_cast<size_t>(shape.numel()), 9, -4, 4), shape));
  const Tensor x = widened(x16);
  const Tensor dy = to_tensor(random_vec(static_cast<size_t>(shape.numel()), 10), shape);
  for (UnaryOp op : {UnaryOp::kGeluErf, UnaryOp::kGeluTanh, UnaryOp::kTanh, UnaryOp::kExp}) {
    SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(op));
    const Tensor want = unary(ctx, op, x);
    const Tensor from16 = unary(ctx, op, x16);
    EXPECT_EQ(from16.dtype(), DType::kF32);
    EXPECT_EQ(from16.to_vector(), want.to_vector());
    expect_rounding_of(unary(ctx, op, x16, true), want, "y");
    const Tensor dx = unary_backward(ctx, op, x16, want, dy);
    EXPECT_EQ(dx.to_vector(), unary_backward(ctx, op, x, want, dy).to_vector());
  }
  // GELU's backward needs no y: a GELU that kept a bf16 y passes none.
  EXPECT_EQ(unary_backward(ctx, UnaryOp::kGeluErf, x16, {}, dy).to_vector(),
            unary_backward(ctx, UnaryOp::kGeluErf, x, {}, dy).to_vector());
  ExecutionContext f32(Device::cpu(), 2, 1);
  EXPECT_EQ(unary(f32, UnaryOp::kGeluErf, x, true).dtype(), DType::kF32);  // the flag needs bf16
}

TEST(Bf16LayerNorm, WritesTheF32ResultRoundedAndKeepsF32Statistics) {  // no bf16 product either
  ExecutionContext& ctx = bf16_context();
  const Shape shape{4, 9, 48};
  const Tensor x = to_tensor(random_vec(static_cast<size_t>(shape.numel()), 11, -3, 5), shape);
  const Tensor w = to_tensor(random_vec(48, 12, 0.5, 1.5), {48}), b = to_tensor(random_vec(48, 13), {48});
  for (bool affine : {true, false}) {
    SCOPED_TRACE(affine ? "affine" : "no weight or bias");
    const LayerNormForward want = layer_norm_forward(ctx, x, 1, affine ? w : Tensor(), affine ? b : Tensor(), 1e-5f);
    const LayerNormForward got =
        layer_norm_forward(ctx, x, 1, affine ? w : Tensor(), affine ? b : Tensor(), 1e-5f, true);
    expect_rounding_of(got.y, want.y, "y");
    EXPECT_EQ(got.mean.to_vector(), want.mean.to_vector());
    EXPECT_EQ(got.var.to_vector(), want.var.to_vector());
  }
}

}  // namespace
}  // namespace tandem::backend::testing
