// Packed self-attention on the CPU backend: bit for bit the head split, attention and merge the
// models wrote out before (here spelt another way with the public ops: the fallback must make pure
// copies around the same attention calls), the layout of q, k and v in qkv against the naive
// reference, empty batches and sequences, and errors that name the problem.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/backend/backend_test_util.h"
#include "tests/backend/nd_ref_util.h"

namespace tandem::backend::testing {
namespace {

struct Packed {
  int64_t b, t, h, d;
  int64_t c() const { return h * d; }
  Shape qkv() const { return {b, t, 3 * c()}; }
};

// q (which 0), k (1) or v (2) as (B, H, T, D): a third of qkv's last dimension, heads before time.
Tensor head_part(Ctx& ctx, const Tensor& qkv, const Packed& s, int which) {
  return backend::transpose(ctx, narrow(ctx, qkv, 2, which * s.c(), s.c()).reshape({s.b, s.t, s.h, s.d}), 1, 2);
}

// (B, H, T, D) -> (B, T, H D).
Tensor merge(Ctx& ctx, const Tensor& x, const Packed& s) {
  return backend::transpose(ctx, x, 1, 2).reshape({s.b, s.t, s.c()});
}

// (B, T, H D) -> (B, H, T, D).
Tensor unmerge(Ctx& ctx, const Tensor& x, const Packed& s) {
  return backend::transpose(ctx, x.reshape({s.b, s.t, s.h, s.d}), 1, 2);
}

class PackedAttentionTest : public ::testing::Test {
 protected:
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_F(PackedAttentionTest, ForwardAndBackwardAreTheSplitAttentionAndMergeBitForBit) {
  for (int64_t d : {8, 64}) {
    for (bool causal : {false, true}) {
      for (float dropout : {0.0f, 0.1f}) {
        const Packed s{2, 37, 3, d};
        SCOPED_TRACE(::testing::Message() << "D " << d << " causal " << causal << " dropout " << dropout);
        const AttentionParams p{.scale = 1.0f / std::sqrt(static_cast<float>(d)), .causal = causal,
                                .dropout_p = dropout, .dropout_seed = 1234};
        const Tensor qkv = to_tensor(random_vec(static_cast<size_t>(s.qkv().numel()), 7, -2.0, 2.0), s.qkv());
        const Tensor dy = to_tensor(random_vec(static_cast<size_t>(s.b * s.t * s.c()), 8), {s.b, s.t, s.c()});

        AttentionForward packed = packed_attention_forward(ctx_, p, s.h, qkv);
        const Tensor q = head_part(ctx_, qkv, s, 0), k = head_part(ctx_, qkv, s, 1), v = head_part(ctx_, qkv, s, 2);
        AttentionForward split = attention_forward(ctx_, p, q, k, v);
        EXPECT_EQ(packed.y.shape(), (Shape{s.b, s.t, s.c()}));
        EXPECT_EQ(packed.y.to_vector(), merge(ctx_, split.y, s).to_vector());
        EXPECT_EQ(packed.lse.to_vector(), split.lse.to_vector());

        const Tensor dqkv = packed_attention_backward(ctx_, p, s.h, qkv, packed.y, packed.lse, dy);
        AttentionGrads g = attention_backward(ctx_, p, q, k, v, Tensor(), split.y, split.lse, unmerge(ctx_, dy, s));
        const Tensor parts[] = {merge(ctx_, g.dq, s), merge(ctx_, g.dk, s), merge(ctx_, g.dv, s)};
        EXPECT_EQ(dqkv.shape(), s.qkv());
        EXPECT_EQ(dqkv.to_vector(), concat(ctx_, parts, 2).to_vector());
      }
    }
  }
}

TEST_F(PackedAttentionTest, ReadsQKAndVOfEachHeadWhereALinearWritesThem) {
  const Packed s{2, 5, 3, 4};
  const Vec x = random_vec(static_cast<size_t>(s.qkv().numel()), 9, -2.0, 2.0);
  // q, k and v of head h at time t: columns [h D, (h + 1) D) of qkv's first, second and third C.
  Vec q, k, v;
  for (int64_t b = 0; b < s.b; ++b) {
    for (int64_t h = 0; h < s.h; ++h) {
      for (int64_t t = 0; t < s.t; ++t) {
        for (int64_t i = 0; i < s.d; ++i) {
          const size_t at = static_cast<size_t>((b * s.t + t) * 3 * s.c() + h * s.d + i);
          q.push_back(x[at]);
          k.push_back(x[at + static_cast<size_t>(s.c())]);
          v.push_back(x[at + static_cast<size_t>(2 * s.c())]);
        }
      }
    }
  }
  const AttentionParams p{.scale = 0.4f, .causal = true};
  AttentionForward f = packed_attention_forward(ctx_, p, s.h, to_tensor(x, s.qkv()));
  const Vec want = attention_ref({s.b, s.h, s.t, s.t, s.d, s.d}, q, k, v, Vec(), 0.4, true);  // (B, H, T, D)
  const Vec want_merged = permute_ref(want, {s.b, s.h, s.t, s.d}, {0, 2, 1, 3});
  EXPECT_LT(rel_error(to_vec(f.y), want_merged), 1e-5);
}

TEST_F(PackedAttentionTest, AnEmptyBatchOrSequenceGivesEmptyResults) {
  const AttentionParams p{.scale = 0.5f, .causal = true};
  for (const Shape& x : {Shape{0, 7, 18}, Shape{2, 0, 18}}) {
    const Tensor qkv = Tensor::zeros(x);
    AttentionForward f = packed_attention_forward(ctx_, p, 3, qkv);
    EXPECT_EQ(f.y.shape(), (Shape{x[0], x[1], 6})) << x.str();
    EXPECT_EQ(f.lse.shape(), (Shape{x[0], 3, x[1]})) << x.str();
    const Tensor dqkv = packed_attention_backward(ctx_, p, 3, qkv, f.y, f.lse, Tensor::zeros(f.y.shape()));
    EXPECT_EQ(dqkv.shape(), x);
    EXPECT_EQ(dqkv.numel(), 0);
  }
}

TEST_F(PackedAttentionTest, BadArgumentsNameTheProblem) {
  const AttentionParams p{.scale = 0.5f};
  const auto forward = [&](const Tensor& qkv, int64_t heads, const AttentionParams& params) {
    return [&, qkv, heads, params] { packed_attention_forward(ctx_, params, heads, qkv); };
  };
  expect_error(forward(Tensor::zeros({2, 5, 20}), 3, p), ErrorCode::kInvalidArgument,
               {"packed_self_attention", "[2, 5, 20]", "multiple of 3 * 3 = 9", "Linear(C, 3 C)"});
  expect_error(forward(Tensor::zeros({5, 18}), 3, p), ErrorCode::kInvalidArgument,
               {"packed_self_attention", "qkv must be 3-D", "[5, 18]"});
  expect_error(forward(Tensor::zeros({2, 5, 18}), 0, p), ErrorCode::kInvalidArgument,
               {"packed_self_attention", "heads must be at least 1, got 0"});
  expect_error(forward(Tensor::zeros({2, 5, 18}, DType::kBF16), 3, p), ErrorCode::kInvalidArgument,
               {"packed_self_attention", "qkv must be f32, got bf16"});
  expect_error(forward(Tensor::zeros({2, 5, 18}), 3, AttentionParams{.dropout_p = 1.0f}), ErrorCode::kInvalidArgument,
               {"packed_self_attention", "dropout_p must be in [0, 1), got 1"});
  // The backward's dy and lse must be the forward's shapes.
  const Tensor qkv = Tensor::zeros({2, 5, 18});
  AttentionForward f = packed_attention_forward(ctx_, p, 3, qkv);
  expect_error([&] { packed_attention_backward(ctx_, p, 3, qkv, f.y, f.lse, Tensor::zeros({2, 5, 7})); },
               ErrorCode::kInvalidArgument, {"packed_self_attention_backward", "dy has shape [2, 5, 7]", "[2, 5, 6]"});
  expect_error([&] { packed_attention_backward(ctx_, p, 2, qkv, f.y, f.lse, f.y); }, ErrorCode::kInvalidArgument,
               {"packed_self_attention_backward", "lse [2, 3, 5] must be (B, H, T) = (2, 2, 5)"});
}

}  // namespace
}  // namespace tandem::backend::testing
