// Attention under precision: bf16 (cpu_attention_bf16.cpp: its products in bf16 through oneDNN's
// matmul) against the f32 kernel, which transformer_ops_test.cpp holds to the double reference:
// outputs, log-sum-exp and the three gradients within bf16's tolerance, and visibly apart (bf16
// really ran), across causal, masked, Tq != Tk, blocks of 128 queries crossed, queries that see
// no key, and dropout (the same mask as in f32). Keys beyond its buffers take the f32 kernel.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/backend/backend_test_util.h"
#include "tests/backend/nd_ref_util.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::backend::testing {
namespace {

struct Case {
  AttentionShape s;
  bool causal, mask;
  float dropout;
};

struct Outputs {
  Vec y, lse, dq, dk, dv;
};

Outputs run(ExecutionContext& ctx, const Case& c) {
  const AttentionShape& s = c.s;
  const Shape qs{s.b, s.h, s.tq, s.d}, ks{s.b, s.h, s.tk, s.d}, vs{s.b, s.h, s.tk, s.dv};
  const Tensor q = to_tensor(random_vec(static_cast<size_t>(qs.numel()), 41, -2.0, 2.0), qs);
  const Tensor k = to_tensor(random_vec(static_cast<size_t>(ks.numel()), 42, -2.0, 2.0), ks);
  const Tensor v = to_tensor(random_vec(static_cast<size_t>(vs.numel()), 43), vs);
  const Tensor mask =
      c.mask ? to_tensor(random_vec(static_cast<size_t>(s.h * s.tq * s.tk), 44, -2.0, 2.0), {1, s.h, s.tq, s.tk})
             : Tensor();
  const AttentionParams p{.scale = 0.35f, .causal = c.causal, .dropout_p = c.dropout, .dropout_seed = 7};
  const AttentionForward f = attention_forward(ctx, p, q, k, v, mask);
  const Tensor dy = to_tensor(random_vec(static_cast<size_t>(f.y.numel()), 45), f.y.shape());
  const AttentionGrads g = attention_backward(ctx, p, q, k, v, mask, f.y, f.lse, dy);
  return {to_vec(f.y), to_vec(f.lse), to_vec(g.dq), to_vec(g.dk), to_vec(g.dv)};
}

// lse is -inf where a query sees no key: compared where finite, and -inf in the same places.
double lse_error(const Vec& got, const Vec& want) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << "row " << i << ": " << got[i];
      continue;
    }
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  }
  return worst;
}

TEST(Bf16Attention, WithinBf16OfTheF32KernelAndApartFromIt) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext f32(Device::cpu(), 2, 1);
  for (const Case& c : {Case{{2, 3, 70, 70, 24, 24}, true, false, 0.0f},
                        Case{{1, 2, 65, 300, 16, 8}, false, true, 0.0f},
                        Case{{1, 1, 5, 300, 8, 8}, true, true, 0.0f},
                        Case{{1, 2, 300, 260, 32, 32}, true, false, 0.0f},
                        Case{{1, 1, 6, 3, 4, 4}, true, false, 0.0f},
                        Case{{2, 2, 9, 9, 8, 8}, true, false, 0.3f}}) {
    const AttentionShape& s = c.s;
    SCOPED_TRACE(::testing::Message() << s.tq << " x " << s.tk << " d " << s.d << " dv " << s.dv << " causal "
                                      << c.causal << " mask " << c.mask << " dropout " << c.dropout);
    const Outputs want = run(f32, c), got = run(tandem::testing::bf16_cpu_context(), c);
    EXPECT_LT(rel_error(got.y, want.y), 2e-2);
    EXPECT_LT(lse_error(got.lse, want.lse), 1e-2);
    EXPECT_LT(rel_error(got.dq, want.dq), 3e-2);
    EXPECT_LT(rel_error(got.dk, want.dk), 3e-2);
    EXPECT_LT(rel_error(got.dv, want.dv), 3e-2);
    if (s.tq > s.tk) continue;  // every query sees some key below: bf16 must show
    EXPECT_GT(rel_error(got.y, want.y), 1e-5) << "the bf16 attention gave the f32 kernel's output";
    EXPECT_GT(rel_error(got.dq, want.dq), 1e-5) << "the bf16 attention gave the f32 kernel's dq";
  }
}

TEST(Bf16Attention, KeysBeyondItsBuffersTakeTheF32Kernel) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext f32(Device::cpu(), 2, 1);
  const Case c{{1, 1, 3, 4097, 4, 4}, false, false, 0.0f};
  const Outputs want = run(f32, c), got = run(tandem::testing::bf16_cpu_context(), c);
  EXPECT_EQ(got.y, want.y);
  EXPECT_EQ(got.dk, want.dk);
}

}  // namespace
}  // namespace tandem::backend::testing
