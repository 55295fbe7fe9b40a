// packed_self_attention on the tape: its gradient against central differences (causal or not, with
// dropout at a fixed seed), and the same output, qkv gradient and generator draws as the head split,
// scaled_dot_product_attention and merge that the GPT and MultiheadAttention composed before.
#include <gtest/gtest.h>

#include <vector>

#include "engine/autograd/gradcheck.h"
#include "engine/autograd/ops.h"
#include "engine/core/random.h"
#include "tests/autograd/autograd_test_util.h"

namespace tandem::autograd {
namespace {

using tandem::testing::random_tensor;

// The composition this op replaces, as models/gpt.cpp wrote it: qkv (B, T, 3C) -> (B, T, C).
Variable split_attention_merge(ExecutionContext& ctx, const Variable& qkv, int64_t h, float dropout, bool causal) {
  const Shape s = qkv.shape();
  const int64_t b = s[0], t = s[1], c = s[2] / 3, d = c / h;
  const int perm[] = {2, 0, 3, 1, 4}, back[] = {0, 2, 1, 3};
  std::vector<Variable> parts = split(ctx, permute(ctx, reshape(ctx, qkv, Shape{b, t, 3, h, d}), perm), 1, 0);
  auto head = [&](const Variable& v) { return reshape(ctx, v, Shape{b, h, t, d}); };
  Variable y = scaled_dot_product_attention(ctx, head(parts[0]), head(parts[1]), head(parts[2]), {}, dropout, causal);
  return reshape(ctx, permute(ctx, y, back), Shape{b, t, c});
}

class PackedSelfAttentionTest : public ::testing::Test {
 protected:
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_F(PackedSelfAttentionTest, GradientMatchesFiniteDifferences) {
  const Tensor qkv = random_tensor({2, 5, 3 * 2 * 3}, 31);  // B 2, T 5, H 2, D 3
  for (bool causal : {false, true}) {
    GradCheckResult r = check_gradients(
        ctx_, [&](const std::vector<Variable>& v) { return packed_self_attention(ctx_, v[0], 2, 0.0f, causal); },
        {qkv});
    EXPECT_TRUE(r.ok) << "causal " << causal << ": " << r.worst;
  }
  // With dropout each evaluation restarts the generator, so every one drops the same entries.
  GradCheckResult r = check_gradients(
      ctx_,
      [&](const std::vector<Variable>& v) {
        ctx_.generator() = Generator(4);
        return packed_self_attention(ctx_, v[0], 2, 0.2f, true, 0.5f);
      },
      {qkv});
  EXPECT_TRUE(r.ok) << "dropout: " << r.worst;
}

TEST_F(PackedSelfAttentionTest, GivesTheSplitAttentionAndMergeBitForBit) {
  const Tensor qkv = random_tensor({2, 37, 3 * 3 * 8}, 32), r = random_tensor({2, 37, 3 * 8}, 33);
  for (float dropout : {0.0f, 0.1f}) {
    auto run = [&](bool packed, std::vector<float>& y, std::vector<float>& dqkv) {
      ctx_.generator() = Generator(9);
      Variable x(qkv.clone(), true);
      Variable out = packed ? packed_self_attention(ctx_, x, 3, dropout, true)
                            : split_attention_merge(ctx_, x, 3, dropout, true);
      sum(ctx_, mul(ctx_, out, Variable(r))).backward(&ctx_);
      y = out.value().to_vector();
      dqkv = x.grad().to_vector();
      return ctx_.generator().next_u64();  // the draws that follow are the same too
    };
    std::vector<float> y_packed, d_packed, y_split, d_split;
    const uint64_t after_packed = run(true, y_packed, d_packed), after_split = run(false, y_split, d_split);
    EXPECT_EQ(y_packed, y_split) << "dropout " << dropout;
    EXPECT_EQ(d_packed, d_split) << "dropout " << dropout;
    EXPECT_EQ(after_packed, after_split) << "dropout " << dropout;
  }
}

TEST_F(PackedSelfAttentionTest, AnUnsplittableProjectionIsAnErrorNamingTheOp) {
  try {
    packed_self_attention(ctx_, Variable(Tensor::zeros({2, 5, 20})), 3);
    FAIL() << "20 columns split into 3 heads of q, k and v";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("packed_self_attention"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::autograd
