// Attention on the tensor cores (precision: bf16; cuda_flash_bf16_*.cu) against the CPU backend's f32
// kernel: y, lse and the three gradients within bf16's tolerance, across head sizes 64 and 128,
// causal and not, dropout (the same mask as the CPU's), lengths that are not a multiple of the 64-row
// tiles, Tq != Tk both ways (queries that see no key); visibly apart from the GPU's f32 kernels (the
// tensor cores really ran); the same bits twice. The packed entries (qkv read by strides, y written
// merged) against the CPU's split-and-merge path, in bf16 and in f32, and on a bf16 qkv writing a bf16 y.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace tandem::backend {
namespace {

using tandem::testing::bitwise_equal;
using tandem::testing::gpu;
using tandem::testing::host_values;
using tandem::testing::random_tensor;

// bf16 operands (8 significant bits) and bf16 probabilities in P V, with f32 accumulation: errors
// relative to the tensor's largest value stay near 2^-8.
constexpr double kBf16Tolerance = 2e-2;
constexpr double kF32Tolerance = 1e-4;

struct Contexts {
  ExecutionContext cpu{Device::cpu(), 2, 1};
  ExecutionContext gpu{Device::cuda(0)};
  explicit Contexts(Precision precision = Precision::kBf16) { gpu.options().precision = precision; }
};

// max |got - want| / max |want|, where -inf (a query that sees no key) must match exactly.
double error(const Tensor& got_t, const Tensor& want_t) {
  const std::vector<float> got = host_values(got_t), want = host_values(want_t);
  EXPECT_EQ(got.size(), want.size());
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      EXPECT_EQ(got[i], want[i]) << "element " << i;
      continue;
    }
    worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
  }
  return scale > 0.0 ? worst / scale : worst;
}

struct Case {
  int64_t b, h, tq, tk, d;
  bool causal;
  float dropout;
};

::testing::Message describe(const Case& c) {
  return ::testing::Message() << c.b << "x" << c.h << " tq " << c.tq << " tk " << c.tk << " d " << c.d << " causal "
                              << c.causal << " dropout " << c.dropout;
}

struct Results {
  Tensor y, lse, dq, dk, dv;
};

struct Inputs {
  Tensor q, k, v, dy;
  explicit Inputs(const Case& c)
      : q(random_tensor({c.b, c.h, c.tq, c.d}, 21, -2.0f, 2.0f)),
        k(random_tensor({c.b, c.h, c.tk, c.d}, 22, -2.0f, 2.0f)),
        v(random_tensor({c.b, c.h, c.tk, c.d}, 23)),
        dy(random_tensor({c.b, c.h, c.tq, c.d}, 24)) {}
};

AttentionParams params(const Case& c) {
  return {.scale = 1.0f / std::sqrt(static_cast<float>(c.d)),
          .causal = c.causal,
          .dropout_p = c.dropout,
          .dropout_seed = 77};
}

Results run(ExecutionContext& ctx, const Case& c, const Inputs& in) {
  const bool on_gpu = !ctx.device().is_cpu();
  auto place = [&](const Tensor& t) { return on_gpu ? gpu(t) : t; };
  const Tensor q = place(in.q), k = place(in.k), v = place(in.v);
  AttentionForward f = attention_forward(ctx, params(c), q, k, v);
  AttentionGrads g = attention_backward(ctx, params(c), q, k, v, Tensor(), f.y, f.lse, place(in.dy));
  return {f.y, f.lse, g.dq, g.dk, g.dv};
}

const Case kCases[] = {
    {2, 3, 130, 130, 64, true, 0.0f}, {1, 2, 70, 70, 64, false, 0.0f}, {1, 2, 130, 130, 128, true, 0.0f},
    {2, 1, 70, 70, 128, false, 0.2f}, {1, 2, 67, 67, 64, true, 0.2f},  {1, 2, 40, 100, 64, true, 0.0f},
    {1, 2, 100, 40, 128, true, 0.0f}, {1, 1, 1, 1, 64, true, 0.0f},
};

TEST(CudaAttentionBf16, MatchesTheCpuWithinBf16AndIsApartFromF32) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  ExecutionContext f32_gpu(Device::cuda(0));
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c));
    const Inputs in(c);
    const Results want = run(ctx.cpu, c, in), got = run(ctx.gpu, c, in), f32 = run(f32_gpu, c, in);
    EXPECT_LT(error(got.y, want.y), kBf16Tolerance);
    EXPECT_LT(error(got.lse, want.lse), kBf16Tolerance);
    EXPECT_LT(error(got.dq, want.dq), kBf16Tolerance);
    EXPECT_LT(error(got.dk, want.dk), kBf16Tolerance);
    EXPECT_LT(error(got.dv, want.dv), kBf16Tolerance);
    if (c.tq > 1) {
      EXPECT_GT(error(got.y, f32.y), 1e-6) << "the tensor cores did not run";
    }
  }
}

TEST(CudaAttentionBf16, RepeatsBitwise) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  for (const Case& c : {kCases[0], kCases[3]}) {
    SCOPED_TRACE(describe(c));
    const Inputs in(c);
    const Results a = run(ctx.gpu, c, in), b = run(ctx.gpu, c, in);
    EXPECT_TRUE(bitwise_equal(a.y, b.y) && bitwise_equal(a.lse, b.lse));
    EXPECT_TRUE(bitwise_equal(a.dq, b.dq) && bitwise_equal(a.dk, b.dk) && bitwise_equal(a.dv, b.dv));
  }
}

struct PackedResults {
  Tensor y, lse, dqkv;
};

PackedResults run_packed(ExecutionContext& ctx, const Case& c, const Tensor& qkv_host, const Tensor& dy_host) {
  const bool on_gpu = !ctx.device().is_cpu();
  const Tensor qkv = on_gpu ? gpu(qkv_host) : qkv_host, dy = on_gpu ? gpu(dy_host) : dy_host;
  AttentionForward f = packed_attention_forward(ctx, params(c), c.h, qkv);
  return {f.y, f.lse, packed_attention_backward(ctx, params(c), c.h, qkv, f.y, f.lse, dy)};
}

void expect_packed_match(Precision precision, double tolerance) {
  Contexts ctx(precision);
  for (const Case& c : kCases) {
    if (c.tq != c.tk) continue;  // self-attention: one T
    SCOPED_TRACE(describe(c) << " precision " << precision_name(precision));
    const Tensor qkv = random_tensor({c.b, c.tq, 3 * c.h * c.d}, 31, -2.0f, 2.0f);
    const Tensor dy = random_tensor({c.b, c.tq, c.h * c.d}, 32);
    const PackedResults want = run_packed(ctx.cpu, c, qkv, dy), got = run_packed(ctx.gpu, c, qkv, dy);
    EXPECT_LT(error(got.y, want.y), tolerance);
    EXPECT_LT(error(got.lse, want.lse), tolerance);
    EXPECT_LT(error(got.dqkv, want.dqkv), tolerance);
  }
}

TEST(CudaAttentionBf16, PackedEntriesMatchTheCpusSplitHeads) {
  TANDEM_REQUIRE_GPU();
  expect_packed_match(Precision::kBf16, kBf16Tolerance);
  expect_packed_match(Precision::kF32, kF32Tolerance);  // head size 64: the f32 kernels by strides
}

TEST(CudaAttentionBf16, PackedEntriesRepeatBitwise) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  const Case c = kCases[4];
  const Tensor qkv = random_tensor({c.b, c.tq, 3 * c.h * c.d}, 33), dy = random_tensor({c.b, c.tq, c.h * c.d}, 34);
  const PackedResults a = run_packed(ctx.gpu, c, qkv, dy), b = run_packed(ctx.gpu, c, qkv, dy);
  EXPECT_TRUE(bitwise_equal(a.y, b.y) && bitwise_equal(a.lse, b.lse) && bitwise_equal(a.dqkv, b.dqkv));
}

// TANDEM_CUDA_ATTENTION set for a scope, then restored (a run may set it from outside).
struct KernelChoice {
  explicit KernelChoice(const char* value) {
    if (const char* before = std::getenv("TANDEM_CUDA_ATTENTION")) saved = before;
    setenv("TANDEM_CUDA_ATTENTION", value, 1);
  }
  ~KernelChoice() {
    if (saved) {
      setenv("TANDEM_CUDA_ATTENTION", saved->c_str(), 1);
    } else {
      unsetenv("TANDEM_CUDA_ATTENTION");
    }
  }
  std::optional<std::string> saved;
  KernelChoice(const KernelChoice&) = delete;
  KernelChoice& operator=(const KernelChoice&) = delete;
};

// A bf16 qkv (a linear layer's bf16 output) is read in place and y written in bf16: the bits of the f32
// y the same kernels give for the widened qkv, rounded, and the same lse. The backward's row term reads
// the bf16 y, so its gradients stay within bf16's tolerance of the CPU's. Both kernel families: the
// tensor cores, and the f32 kernels (widening qkv into the workspace; head size 128 splits the heads).
TEST(CudaAttentionBf16, PackedEntriesTakeABf16QkvAndWriteABf16Y) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  for (const char* kernels : {"auto", "f32"}) {
    const KernelChoice choice(kernels);
    for (const Case& c : kCases) {
      if (c.tq != c.tk) continue;  // self-attention: one T
      SCOPED_TRACE(describe(c) << " kernels " << kernels);
      const Tensor qkv16 = bf16_operand(ctx.gpu, gpu(random_tensor({c.b, c.tq, 3 * c.h * c.d}, 35, -2.0f, 2.0f)));
      const Tensor qkv = Tensor::from_vector(host_values(qkv16), qkv16.shape());  // its f32 values, on the host
      const Tensor dy = random_tensor({c.b, c.tq, c.h * c.d}, 36);
      const AttentionForward want = packed_attention_forward(ctx.gpu, params(c), c.h, gpu(qkv));
      const AttentionForward got = packed_attention_forward(ctx.gpu, params(c), c.h, qkv16, true);
      ASSERT_EQ(got.y.dtype(), DType::kBF16);
      EXPECT_TRUE(bitwise_equal(got.y, bf16_operand(ctx.gpu, want.y)));
      EXPECT_TRUE(bitwise_equal(got.lse, want.lse));
      const Tensor dqkv = packed_attention_backward(ctx.gpu, params(c), c.h, qkv16, got.y, got.lse, gpu(dy));
      const PackedResults cpu = run_packed(ctx.cpu, c, qkv, dy);
      EXPECT_LT(error(got.y, cpu.y), kBf16Tolerance);
      EXPECT_LT(error(dqkv, cpu.dqkv), kBf16Tolerance);
    }
  }
}

TEST(CudaAttentionBf16, AnUnknownKernelChoiceIsRefusedByName) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  const Case c = kCases[1];
  const Inputs in(c);
  const KernelChoice choice("tensorcores");
  try {
    run(ctx.gpu, c, in);
    ADD_FAILURE() << "TANDEM_CUDA_ATTENTION=tensorcores was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TANDEM_CUDA_ATTENTION"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::backend
