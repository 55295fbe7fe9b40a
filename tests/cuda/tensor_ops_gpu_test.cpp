// The CUDA N-D and transformer kernels against the CPU backend on the same random inputs, through
// ops.h: permute, expand, narrow and concat (f32 and i64), broadcasting arithmetic, the unary
// functions and their derivatives, masked_fill, reductions and the max's gradient, softmax and its
// backward, layer norm with and without weight and bias, batched matmul with broadcast batches in
// fp32, attention (the tiled kernels for head sizes 16 to 64, the unfused path for others and
// forced, causal, masked, Tq != Tk, dropout) forward and backward, embedding (its backward bitwise
// repeatable), and cross-entropy's ignore_index. Odd sizes throughout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/core/context.h"
#include "engine/core/random.h"
#include "tests/cuda/cuda_test_util.h"

namespace tandem::backend {
namespace {

const Device kGpu = Device::cuda(0);

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = g.uniform(lo, hi);
  return Tensor::from_vector(v, shape);
}

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to_vector(); }

// The worst element's error relative to the largest |want| (NaN fails).
::testing::AssertionResult near(const Tensor& got, const Tensor& want, double tol) {
  std::vector<float> g = values(got), w = values(want);
  if (got.shape() != want.shape()) return ::testing::AssertionFailure() << got.describe() << " vs " << want.describe();
  double scale = 1e-30, worst = 0.0;
  size_t at = 0;
  for (float x : w) scale = std::max(scale, std::abs(static_cast<double>(x)));
  for (size_t i = 0; i < w.size(); ++i) {
    const double err = std::abs(static_cast<double>(g[i]) - w[i]);
    if (!(err <= worst)) {
      worst = std::isnan(err) ? INFINITY : err;
      at = i;
    }
  }
  if (worst / scale <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << at << ": got " << g[at] << ", want " << w[at] << " (error "
                                       << worst / scale << " of the scale, tolerance " << tol << ")";
}

struct Contexts {
  ExecutionContext cpu{Device::cpu(), 2, 1};
  ExecutionContext gpu{kGpu};
};

class TensorOpsGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string reason = ::tandem::testing::cuda_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
    c_ = std::make_unique<Contexts>();
    bind_ = std::make_unique<ContextBinding>(c_->gpu);
  }
  ExecutionContext& cpu() { return c_->cpu; }
  ExecutionContext& gpu() { return c_->gpu; }
  std::unique_ptr<Contexts> c_;
  std::unique_ptr<ContextBinding> bind_;
};

TEST_F(TensorOpsGpuTest, DataMovementMatchesTheCpu) {
  Tensor x = random_tensor({3, 5, 7, 2}, 1);
  const int perm[] = {2, 0, 3, 1};
  EXPECT_EQ(values(permute(gpu(), x.to(kGpu), perm)), values(permute(cpu(), x, perm)));
  EXPECT_EQ(values(expand(gpu(), random_tensor({5, 1}, 2).to(kGpu), {3, 5, 4})),
            values(expand(cpu(), random_tensor({5, 1}, 2), {3, 5, 4})));
  Tensor ids = Tensor::empty({4, 3}, DType::kI64);
  for (int64_t i = 0; i < 12; ++i) ids.data<int64_t>()[i] = 1000 + i;
  const int swap[] = {1, 0};
  Tensor moved = permute(gpu(), ids.to(kGpu), swap).to(Device::cpu());
  EXPECT_EQ(moved.data<int64_t>()[1], 1003);
  Tensor a = narrow(gpu(), x.to(kGpu), 1, 1, 3), b = narrow(gpu(), x.to(kGpu), 1, 0, 1);
  EXPECT_EQ(values(a), values(narrow(cpu(), x, 1, 1, 3)));
  const Tensor parts[] = {a, b};
  const Tensor cpu_parts[] = {narrow(cpu(), x, 1, 1, 3), narrow(cpu(), x, 1, 0, 1)};
  EXPECT_EQ(values(concat(gpu(), parts, 1)), values(concat(cpu(), cpu_parts, 1)));
}

TEST_F(TensorOpsGpuTest, PointwiseOpsMatchTheCpu) {
  struct Pair {
    Shape a, b;
  };
  for (const Pair& p : {Pair{{33, 17}, {33, 17}}, Pair{{4, 9, 65}, {65}}, Pair{{5, 1, 3}, {7, 1}}}) {
    Tensor a = random_tensor(p.a, 3, 0.5f, 2.0f), b = random_tensor(p.b, 4, 0.5f, 2.0f);
    for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv}) {
      EXPECT_TRUE(near(binary(gpu(), op, a.to(kGpu), b.to(kGpu)), binary(cpu(), op, a, b), 1e-6))
          << p.a.str() << " " << p.b.str() << " op " << static_cast<int>(op);
    }
  }
  Tensor x = random_tensor({7, 129}, 5, 0.1f, 3.0f), dy = random_tensor({7, 129}, 6);
  for (UnaryOp op : {UnaryOp::kExp, UnaryOp::kLog, UnaryOp::kSqrt, UnaryOp::kRsqrt, UnaryOp::kTanh,
                     UnaryOp::kGeluErf, UnaryOp::kGeluTanh, UnaryOp::kSigmoid, UnaryOp::kSilu, UnaryOp::kAbs,
                     UnaryOp::kSin, UnaryOp::kCos}) {
    Tensor gy = unary(gpu(), op, x.to(kGpu)), cy = unary(cpu(), op, x);
    EXPECT_TRUE(near(gy, cy, 1e-5)) << static_cast<int>(op);
    EXPECT_TRUE(near(unary_backward(gpu(), op, x.to(kGpu), gy, dy.to(kGpu)), unary_backward(cpu(), op, x, cy, dy), 1e-5))
        << static_cast<int>(op);
  }
  Tensor mask = Tensor::zeros({1, 129}, DType::kU8);
  for (int i = 0; i < 129; i += 3) mask.data<uint8_t>()[i] = 1;
  EXPECT_EQ(values(masked_fill(gpu(), x.to(kGpu), mask.to(kGpu), -1.5f)), values(masked_fill(cpu(), x, mask, -1.5f)));
}

TEST_F(TensorOpsGpuTest, ReductionsAndSoftmaxMatchTheCpu) {
  Tensor x = random_tensor({5, 37, 66}, 7, -3.0f, 3.0f), dy = random_tensor({5, 37, 66}, 8);
  for (Reduction r : {Reduction::kSum, Reduction::kMean, Reduction::kMax}) {
    for (int axis : {0, 1, 2}) {
      Tensor g = reduce(gpu(), r, x.to(kGpu), std::span<const int>(&axis, 1), true);
      EXPECT_TRUE(near(g, reduce(cpu(), r, x, std::span<const int>(&axis, 1), true), 1e-5))
          << static_cast<int>(r) << " axis " << axis;
    }
  }
  const int last = -1;
  Tensor gdy = random_tensor({5, 37, 1}, 9);
  EXPECT_TRUE(near(max_backward(gpu(), x.to(kGpu), std::span<const int>(&last, 1), gdy.to(kGpu)),
                   max_backward(cpu(), x, std::span<const int>(&last, 1), gdy), 1e-6));
  for (bool log : {false, true}) {
    for (int axis : {1, 2}) {
      Tensor gy = softmax(gpu(), x.to(kGpu), axis, log), cy = softmax(cpu(), x, axis, log);
      EXPECT_TRUE(near(gy, cy, 1e-5)) << log << " " << axis;
      EXPECT_TRUE(near(softmax_backward(gpu(), gy, dy.to(kGpu), axis, log), softmax_backward(cpu(), cy, dy, axis, log),
                       1e-4))
          << log << " " << axis;
    }
  }
}

TEST_F(TensorOpsGpuTest, LayerNormMatchesTheCpu) {
  Tensor x = random_tensor({3, 301, 67}, 10, -2.0f, 2.0f), dy = random_tensor({3, 301, 67}, 11);
  Tensor w = random_tensor({67}, 12, 0.5f, 1.5f), b = random_tensor({67}, 13);
  for (int variant = 0; variant < 3; ++variant) {
    Tensor gw = variant < 2 ? w : Tensor(), gb = variant < 1 ? b : Tensor();
    LayerNormForward c = layer_norm_forward(cpu(), x, 1, gw, gb, 1e-5f);
    LayerNormForward g = layer_norm_forward(gpu(), x.to(kGpu), 1, gw.defined() ? gw.to(kGpu) : Tensor(),
                                            gb.defined() ? gb.to(kGpu) : Tensor(), 1e-5f);
    EXPECT_TRUE(near(g.y, c.y, 1e-5)) << variant;
    LayerNormGrads cd = layer_norm_backward(cpu(), x, dy, gw, gb.defined(), c.mean, c.var, 1e-5f);
    LayerNormGrads gd = layer_norm_backward(gpu(), x.to(kGpu), dy.to(kGpu), gw.defined() ? gw.to(kGpu) : Tensor(),
                                            gb.defined(), g.mean, g.var, 1e-5f);
    EXPECT_TRUE(near(gd.dx, cd.dx, 1e-4)) << variant;
    if (gw.defined()) {
      EXPECT_TRUE(near(gd.dweight, cd.dweight, 1e-4)) << variant;
    }
    if (gb.defined()) {
      EXPECT_TRUE(near(gd.dbias, cd.dbias, 1e-4)) << variant;
    }
  }
}

TEST_F(TensorOpsGpuTest, BatchedMatmulMatchesTheCpu) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  for (const Case& c : {Case{{3, 33, 17}, {3, 17, 9}, false, false}, Case{{1, 33, 17}, {4, 9, 17}, false, true},
                        Case{{2, 3, 17, 33}, {17, 5}, true, false}}) {
    Tensor a = random_tensor(c.a, 14), b = random_tensor(c.b, 15);
    EXPECT_TRUE(near(matmul_nd(gpu(), a.to(kGpu), b.to(kGpu), c.ta, c.tb), matmul_nd(cpu(), a, b, c.ta, c.tb), 1e-5))
        << c.a.str() << " x " << c.b.str();
  }
}

struct AttnCase {
  int64_t b, h, tq, tk, d;
  bool causal, mask;
  float dropout;
};

void attention_case(ExecutionContext& gpu, ExecutionContext& cpu, const AttnCase& c) {
  Tensor q = random_tensor({c.b, c.h, c.tq, c.d}, 21, -2.0f, 2.0f), k = random_tensor({c.b, c.h, c.tk, c.d}, 22, -2.0f, 2.0f);
  Tensor v = random_tensor({c.b, c.h, c.tk, c.d}, 23), dy = random_tensor({c.b, c.h, c.tq, c.d}, 24);
  Tensor mask = c.mask ? random_tensor({1, c.h, c.tq, c.tk}, 25, -1.0f, 1.0f) : Tensor();
  AttentionParams p{.scale = 1.0f / std::sqrt(static_cast<float>(c.d)), .causal = c.causal, .dropout_p = c.dropout,
                    .dropout_seed = 77};
  AttentionForward cf = attention_forward(cpu, p, q, k, v, mask);
  AttentionForward gf = attention_forward(gpu, p, q.to(kGpu), k.to(kGpu), v.to(kGpu), mask.defined() ? mask.to(kGpu) : mask);
  EXPECT_TRUE(near(gf.y, cf.y, 1e-5));
  EXPECT_TRUE(near(gf.lse, cf.lse, 1e-5));
  AttentionGrads cg = attention_backward(cpu, p, q, k, v, mask, cf.y, cf.lse, dy);
  AttentionGrads gg = attention_backward(gpu, p, q.to(kGpu), k.to(kGpu), v.to(kGpu),
                                         mask.defined() ? mask.to(kGpu) : mask, gf.y, gf.lse, dy.to(kGpu));
  EXPECT_TRUE(near(gg.dq, cg.dq, 1e-4));
  EXPECT_TRUE(near(gg.dk, cg.dk, 1e-4));
  EXPECT_TRUE(near(gg.dv, cg.dv, 1e-4));
}

TEST_F(TensorOpsGpuTest, AttentionMatchesTheCpuOnBothPaths) {
  const AttnCase cases[] = {{2, 3, 130, 130, 64, true, false, 0.0f}, {1, 2, 70, 200, 32, false, true, 0.0f},
                            {2, 2, 5, 77, 16, true, true, 0.0f},     {1, 3, 67, 67, 48, true, false, 0.2f},
                            {1, 2, 33, 45, 40, false, false, 0.0f},  {2, 1, 40, 40, 80, true, false, 0.1f}};
  for (const AttnCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.b << "x" << c.h << " tq " << c.tq << " tk " << c.tk << " d " << c.d
                                    << " causal " << c.causal << " mask " << c.mask << " dropout " << c.dropout);
    attention_case(gpu(), cpu(), c);
  }
  // The unfused path on the shapes the tiled kernels take (TANDEM_CUDA_ATTENTION=unfused).
  setenv("TANDEM_CUDA_ATTENTION", "unfused", 1);
  for (const AttnCase& c : {cases[0], cases[2], cases[3]}) {
    SCOPED_TRACE(::testing::Message() << "unfused d " << c.d << " tq " << c.tq);
    attention_case(gpu(), cpu(), c);
  }
  unsetenv("TANDEM_CUDA_ATTENTION");
}

TEST_F(TensorOpsGpuTest, EmbeddingMatchesTheCpuAndItsBackwardRepeatsBitwise) {
  Tensor w = random_tensor({257, 67}, 31);
  Tensor ids = Tensor::empty({9, 130}, DType::kI64);
  Generator g(32);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = static_cast<int64_t>(g.below(40));  // repeats
  Tensor dy = random_tensor({9, 130, 67}, 33);
  EXPECT_EQ(values(embedding_forward(gpu(), w.to(kGpu), ids.to(kGpu))), values(embedding_forward(cpu(), w, ids)));
  Tensor first = embedding_backward(gpu(), ids.to(kGpu), dy.to(kGpu), 257);
  EXPECT_TRUE(near(first, embedding_backward(cpu(), ids, dy, 257), 1e-5));
  EXPECT_EQ(values(first), values(embedding_backward(gpu(), ids.to(kGpu), dy.to(kGpu), 257)));
  ids.data<int64_t>()[5] = 257;  // out of range: a NaN row on the device, never a read past the table
  std::vector<float> y = values(embedding_forward(gpu(), w.to(kGpu), ids.to(kGpu)));
  EXPECT_TRUE(std::isnan(y[5 * 67]));
}

TEST_F(TensorOpsGpuTest, CrossEntropyIgnoreIndexMatchesTheCpu) {
  Tensor z = random_tensor({37, 300}, 41, -3.0f, 3.0f);
  Tensor labels = Tensor::empty({37}, DType::kI64);
  for (int64_t i = 0; i < 37; ++i) labels.data<int64_t>()[i] = i % 5 == 0 ? -100 : (i * 7) % 300;
  SoftmaxCrossEntropyForward c = softmax_cross_entropy_forward(cpu(), z, labels, 0.1f, -100);
  SoftmaxCrossEntropyForward gf = softmax_cross_entropy_forward(gpu(), z.to(kGpu), labels.to(kGpu), 0.1f, -100);
  EXPECT_TRUE(near(gf.loss, c.loss, 1e-5));
  Tensor dloss = random_tensor({37}, 42);
  EXPECT_TRUE(near(softmax_cross_entropy_backward(gpu(), gf.probs, labels.to(kGpu), 0.1f, dloss.to(kGpu), -100),
                   softmax_cross_entropy_backward(cpu(), c.probs, labels, 0.1f, dloss, -100), 1e-5));
}

}  // namespace
}  // namespace tandem::backend
