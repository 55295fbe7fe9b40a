// The fused classifier (linear_cross_entropy_loss) against the ops it fuses, cross_entropy_loss of
// linear: bit for bit on the CPU while one chunk holds every row, within rounding over many chunks,
// under bf16 too, and against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/autograd/gradcheck.h"
#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"
#include "engine/core/random.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::autograd {
namespace {

Tensor normal(const Shape& shape, uint64_t seed, float stddev = 1.0f) {
  Generator g(seed);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = stddev * g.normal();
  return t;
}

Tensor labels_of(const Shape& shape, int64_t classes, uint64_t seed) {
  Generator g(seed);
  Tensor t = Tensor::empty(shape, DType::kI64);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<int64_t>()[i] = static_cast<int64_t>(g.uniform() * static_cast<float>(classes)) % classes;
  }
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

double max_relative_gap(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = got.to_vector(), w = want.to_vector();
  EXPECT_EQ(g.size(), w.size());
  double scale = 0.0, gap = 0.0;
  for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(w[i])));
    gap = std::max(gap, std::fabs(static_cast<double>(g[i]) - w[i]));
  }
  return scale > 0.0 ? gap / scale : gap;
}

struct Outcome {
  Tensor loss, dx, dw;
};

// Loss and gradients of both paths from the same x (2, 5, C), w (V, C) and labels (2, 5).
struct Problem {
  Tensor x = normal({2, 5, 12}, 1), w = normal({37, 12}, 2, 0.3f), labels = labels_of({2, 5}, 37, 3);
  float smoothing = 0.0f;
  int64_t divisor = 10;
  int64_t ignore_index = backend::kNoIgnoreIndex;

  Outcome unfused(ExecutionContext& ctx) const {
    Variable xv(x, true), wv(w, true);
    Variable logits = linear(ctx, xv, wv, Variable());
    Variable per_row = softmax_cross_entropy(ctx, logits, labels, smoothing, ignore_index);
    Variable loss = scale(ctx, sum(ctx, per_row), 1.0f / static_cast<float>(divisor));
    loss.backward(&ctx);
    return {loss.value(), xv.grad(), wv.grad()};
  }

  Outcome fused(ExecutionContext& ctx, int64_t chunk_elements) const {
    Variable xv(x, true), wv(w, true);
    LinearCrossEntropyOptions o;
    o.label_smoothing = smoothing;
    o.divisor = divisor;
    o.ignore_index = ignore_index;
    o.chunk_elements = chunk_elements;
    Variable loss = linear_cross_entropy_loss(ctx, xv, wv, labels, o);
    loss.backward(&ctx);
    return {loss.value(), xv.grad(), wv.grad()};
  }
};

ExecutionContext& cpu() {
  static ExecutionContext ctx(Device::cpu(), 2);
  return ctx;
}

TEST(LinearCrossEntropy, OneChunkIsBitForBitTheUnfusedOps) {
  Problem p;
  p.smoothing = 0.1f;
  const Outcome want = p.unfused(cpu()), got = p.fused(cpu(), 0);
  EXPECT_TRUE(same_bits(got.loss, want.loss)) << got.loss.to_vector()[0] << " vs " << want.loss.to_vector()[0];
  EXPECT_TRUE(same_bits(got.dx, want.dx));
  EXPECT_TRUE(same_bits(got.dw, want.dw));
  EXPECT_EQ(got.dx.shape(), p.x.shape());
}

TEST(LinearCrossEntropy, ChunksOfUnevenRowsAgreeWithinRounding) {
  Problem p;
  p.smoothing = 0.05f;
  const Outcome want = p.unfused(cpu());
  for (int64_t rows_per_chunk : {1, 3, 4, 9}) {  // 10 rows: the last chunk is short except at 1
    const Outcome got = p.fused(cpu(), rows_per_chunk * 37);
    EXPECT_LT(max_relative_gap(got.loss, want.loss), 1e-6) << rows_per_chunk << " rows a chunk";
    EXPECT_LT(max_relative_gap(got.dx, want.dx), 1e-5) << rows_per_chunk << " rows a chunk";
    EXPECT_LT(max_relative_gap(got.dw, want.dw), 1e-5) << rows_per_chunk << " rows a chunk";
  }
}

TEST(LinearCrossEntropy, IgnoredRowsLoseNothingAndPassNoGradient) {
  Problem p;
  p.ignore_index = -100;
  p.labels.data<int64_t>()[2] = -100;
  p.labels.data<int64_t>()[7] = -100;
  const Outcome want = p.unfused(cpu()), got = p.fused(cpu(), 2 * 37);
  EXPECT_LT(max_relative_gap(got.loss, want.loss), 1e-6);
  EXPECT_LT(max_relative_gap(got.dw, want.dw), 1e-5);
  const std::vector<float> dx = got.dx.to_vector();
  for (int64_t j = 0; j < 12; ++j) {
    EXPECT_EQ(dx[static_cast<size_t>(2 * 12 + j)], 0.0f);
    EXPECT_EQ(dx[static_cast<size_t>(7 * 12 + j)], 0.0f);
  }
}

TEST(LinearCrossEntropy, BackwardScalesByTheIncomingGradient) {
  Problem p;
  Variable x(p.x, true), w(p.w, true);
  LinearCrossEntropyOptions o;
  o.divisor = p.divisor;
  o.chunk_elements = 4 * 37;
  scale(cpu(), linear_cross_entropy_loss(cpu(), x, w, p.labels, o), 3.0f).backward(&cpu());
  const Outcome unit = p.fused(cpu(), 4 * 37);
  const std::vector<float> dx = x.grad().to_vector(), dx1 = unit.dx.to_vector();
  const std::vector<float> dw = w.grad().to_vector(), dw1 = unit.dw.to_vector();
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_EQ(dx[i], 3.0f * dx1[i]) << i;
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_EQ(dw[i], 3.0f * dw1[i]) << i;
}

TEST(LinearCrossEntropy, GradientsMatchFiniteDifferences) {
  const Tensor labels = labels_of({6}, 7, 11);
  auto f = [&](const std::vector<Variable>& in) {
    LinearCrossEntropyOptions o;
    o.label_smoothing = 0.1f;
    o.divisor = 6;
    o.chunk_elements = 4 * 7;  // two chunks, the second short
    return linear_cross_entropy_loss(cpu(), in[0], in[1], labels, o);
  };
  GradCheckResult r = check_gradients(cpu(), f, {normal({6, 5}, 12), normal({7, 5}, 13, 0.5f)});
  EXPECT_TRUE(r.ok) << r.worst;
}

TEST(LinearCrossEntropy, WithoutGradientModeItRecordsNothing) {
  Problem p;
  NoGradGuard no_grad;
  Variable x(p.x, true), w(p.w, true);
  Variable loss = linear_cross_entropy_loss(cpu(), x, w, p.labels, {.divisor = p.divisor});
  EXPECT_FALSE(loss.requires_grad());
  EXPECT_TRUE(loss.is_leaf());
  EXPECT_GT(loss.value().to_vector()[0], 0.0f);
}

TEST(LinearCrossEntropy, OnlyTheWeightNeedsAGradient) {
  Problem p;
  Variable x(p.x, false), w(p.w, true);
  linear_cross_entropy_loss(cpu(), x, w, p.labels, {.divisor = p.divisor, .chunk_elements = 3 * 37}).backward(&cpu());
  EXPECT_FALSE(x.has_grad());
  EXPECT_LT(max_relative_gap(w.grad(), p.unfused(cpu()).dw), 1e-5);
}

TEST(LinearCrossEntropy, UnderBf16OneChunkIsBitForBitTheUnfusedOps) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext& ctx = tandem::testing::bf16_cpu_context();
  Problem p;
  const Outcome want = p.unfused(ctx), got = p.fused(ctx, 0);
  EXPECT_TRUE(same_bits(got.loss, want.loss));
  EXPECT_TRUE(same_bits(got.dx, want.dx));
  EXPECT_TRUE(same_bits(got.dw, want.dw));
  const Outcome chunked = p.fused(ctx, 3 * 37);
  EXPECT_LT(max_relative_gap(chunked.loss, want.loss), 1e-6);
  EXPECT_LT(max_relative_gap(chunked.dw, want.dw), 1e-5);
}

TEST(LinearCrossEntropy, RefusesMismatchedShapesByName) {
  Problem p;
  Variable x(p.x, true), w(p.w, true);
  try {
    linear_cross_entropy_loss(cpu(), x, Variable(normal({37, 11}, 4)), p.labels);
    ADD_FAILURE() << "a (37, 11) weight for 12 features was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(classes, features)"), std::string::npos) << e.what();
  }
  try {
    linear_cross_entropy_loss(cpu(), x, w, labels_of({9}, 37, 5));
    ADD_FAILURE() << "9 labels for 10 rows were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("9 labels for 10 rows"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::autograd
