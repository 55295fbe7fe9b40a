// The CUDA matmul, linear and optimizer kernels against the CPU backend on the same random inputs,
// through ops.h as the engine calls them: matmul with every transpose pair and odd sizes (1x1x1,
// 3x5x7, 129x65x33) in fp32, tf32 and bf16; the linear layer forward (with and without bias) and
// both backwards; an empty inner dimension; SGD (plain, weight decay, momentum with dampening,
// nesterov, first step) and AdamW over 37 tensors of odd sizes for 3 steps, and over more tensors
// than one launch packs; squared norms against the CPU and bitwise repeatable across calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/core/context.h"
#include "engine/core/random.h"
#include "engine/core/tensor.h"
#include "tests/cuda/cuda_test_util.h"

namespace tandem::backend {
namespace {

const Device kGpu = Device::cuda(0);

Tensor random_tensor(const Shape& shape, uint64_t seed, MemoryFormat format = MemoryFormat::kContiguous) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& x : v) x = g.uniform(-1.0f, 1.0f);
  Tensor t = Tensor::from_vector(v, shape);
  return format == MemoryFormat::kContiguous ? t : t.to_format(format);
}

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to_vector(); }

// max |got - want| / max |want|: the worst element's error relative to the result's scale (a
// product's elements can be near zero by cancellation, so not relative to each element).
::testing::AssertionResult scaled_close(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " and " << want.size();
  }
  double scale = 1e-30, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      at = i;
    }
  }
  if (worst / scale <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << at << ": got " << got[at] << ", want " << want[at]
                                       << " (error " << worst / scale << " of the scale " << scale << ", tolerance "
                                       << tol << ")";
}

// Every element within rel * (1 + |want|): for the optimizers, whose outputs are elementwise.
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, double rel) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " and " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    if (!(std::abs(g - w) <= rel * (1.0 + std::abs(w)))) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", want " << w;
    }
  }
  return ::testing::AssertionSuccess();
}

double tolerance(Precision p) {
  switch (p) {
    case Precision::kF32: return 1e-4;
    case Precision::kTf32: return 1e-2;
    case Precision::kBf16: return 3e-2;
  }
  return 0.0;
}

struct Contexts {
  ExecutionContext cpu{Device::cpu(), 2, 1};
  ExecutionContext gpu{kGpu, 0, 1};
};

constexpr Precision kPrecisions[] = {Precision::kF32, Precision::kTf32, Precision::kBf16};

struct Dims {
  int64_t m, k, n;
};
constexpr Dims kSizes[] = {{1, 1, 1}, {3, 5, 7}, {129, 65, 33}};

TEST(MatmulGpu, EveryTransposeAndOddSizesMatchCpu) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  uint64_t seed = 10;
  for (Precision p : kPrecisions) {
    c.gpu.options().precision = p;
    for (Dims d : kSizes) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          SCOPED_TRACE(std::string(precision_name(p)) + " m=" + std::to_string(d.m) + " k=" + std::to_string(d.k) +
                       " n=" + std::to_string(d.n) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
          Tensor a = random_tensor(ta ? Shape{d.k, d.m} : Shape{d.m, d.k}, ++seed);
          Tensor b = random_tensor(tb ? Shape{d.n, d.k} : Shape{d.k, d.n}, ++seed);
          Tensor want = matmul(c.cpu, a, b, ta, tb);
          Tensor got = matmul(c.gpu, a.to(kGpu), b.to(kGpu), ta, tb);
          ASSERT_EQ(got.shape(), Shape({d.m, d.n}));
          EXPECT_TRUE(scaled_close(values(got), values(want), tolerance(p)));
        }
      }
    }
  }
}

TEST(MatmulGpu, RepeatedCallsReuseThePlanAndGiveTheSameBits) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  Tensor a = random_tensor({129, 65}, 1).to(kGpu), b = random_tensor({33, 65}, 2).to(kGpu);
  std::vector<float> first = values(matmul(c.gpu, a, b, false, true));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(values(matmul(c.gpu, a, b, false, true)), first);
}

TEST(LinearGpu, ForwardWithAndWithoutBiasAndBothBackwardsMatchCpu) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  uint64_t seed = 100;
  for (Precision p : kPrecisions) {
    c.gpu.options().precision = p;
    for (Dims d : kSizes) {
      const int64_t batch = d.m, in = d.k, out = d.n;
      SCOPED_TRACE(std::string(precision_name(p)) + " batch=" + std::to_string(batch) + " in=" + std::to_string(in) +
                   " out=" + std::to_string(out));
      Tensor x = random_tensor({batch, in}, ++seed), w = random_tensor({out, in}, ++seed);
      Tensor b = random_tensor({out}, ++seed), dy = random_tensor({batch, out}, ++seed);
      Tensor gx = x.to(kGpu), gw = w.to(kGpu), gb = b.to(kGpu), gdy = dy.to(kGpu);

      EXPECT_TRUE(scaled_close(values(linear_forward(c.gpu, gx, gw, gb)), values(linear_forward(c.cpu, x, w, b)),
                               tolerance(p)));
      EXPECT_TRUE(scaled_close(values(linear_forward(c.gpu, gx, gw)), values(linear_forward(c.cpu, x, w)),
                               tolerance(p)));
      EXPECT_TRUE(scaled_close(values(linear_backward_data(c.gpu, gdy, gw)), values(linear_backward_data(c.cpu, dy, w)),
                               tolerance(p)));

      LinearWeightGrads want = linear_backward_weights(c.cpu, x, dy, true);
      LinearWeightGrads got = linear_backward_weights(c.gpu, gx, gdy, true);
      EXPECT_TRUE(scaled_close(values(got.dw), values(want.dw), tolerance(p)));
      // The bias gradient always sums the f32 dy (in double), whatever the precision.
      EXPECT_TRUE(close(values(got.db), values(want.db), 1e-5));
      LinearWeightGrads no_bias = linear_backward_weights(c.gpu, gx, gdy, false);
      EXPECT_FALSE(no_bias.db.defined());
      EXPECT_TRUE(scaled_close(values(no_bias.dw), values(want.dw), tolerance(p)));
    }
  }
}

TEST(LinearGpu, BiasGradientOfManyRowsIsRepeatable) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  Tensor x = random_tensor({4099, 3}, 7), dy = random_tensor({4099, 45}, 8);
  LinearWeightGrads want = linear_backward_weights(c.cpu, x, dy, true);
  Tensor gx = x.to(kGpu), gdy = dy.to(kGpu);
  std::vector<float> first = values(linear_backward_weights(c.gpu, gx, gdy, true).db);
  EXPECT_TRUE(close(first, values(want.db), 1e-5));
  EXPECT_EQ(values(linear_backward_weights(c.gpu, gx, gdy, true).db), first);
}

TEST(LinearGpu, EmptyInnerDimensionGivesTheBias) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  Tensor x = Tensor::empty({3, 0}, DType::kF32, kGpu), w = Tensor::empty({4, 0}, DType::kF32, kGpu);
  Tensor b = random_tensor({4}, 3);
  std::vector<float> want, bias = b.to_vector();
  for (int row = 0; row < 3; ++row) want.insert(want.end(), bias.begin(), bias.end());
  EXPECT_EQ(values(linear_forward(c.gpu, x, w, b.to(kGpu))), want);
  EXPECT_EQ(values(linear_forward(c.gpu, x, w)), std::vector<float>(12, 0.0f));
}

// Parameter-like tensors of odd sizes: single elements, sizes around the 1024-element chunk, one
// larger than 512 chunks (so its blocks stride over several chunks), 2-D and channels-last 4-D.
struct ParamShape {
  Shape shape;
  MemoryFormat format = MemoryFormat::kContiguous;
};

std::vector<ParamShape> odd_shapes() {
  std::vector<ParamShape> shapes = {{{1}},         {{1}},         {{3}},        {{7, 5}},       {{1023}},
                                    {{1024}},      {{1025}},      {{33, 65}},   {{600001}},     {{1}},
                                    {{2, 3, 5, 7}, MemoryFormat::kChannelsLast}, {{64, 3, 7, 7}},
                                    {{17, 1}},     {{4097}},      {{5, 5, 3, 3}, MemoryFormat::kChannelsLast}};
  for (int64_t i = 0; static_cast<int>(shapes.size()) < 37; ++i) shapes.push_back({{(i * 131) % 3001 + 1}});
  return shapes;
}

std::vector<ParamShape> many_small_shapes(int count) {
  std::vector<ParamShape> shapes;
  for (int i = 0; i < count; ++i) shapes.push_back({{(i * 7) % 50 + 1}});
  return shapes;
}

std::vector<Tensor> random_list(const std::vector<ParamShape>& shapes, uint64_t seed) {
  std::vector<Tensor> out;
  for (const ParamShape& s : shapes) out.push_back(random_tensor(s.shape, seed++, s.format));
  return out;
}

std::vector<Tensor> to_gpu(const std::vector<Tensor>& list) {
  std::vector<Tensor> out;
  for (const Tensor& t : list) out.push_back(t.to(kGpu));
  return out;
}

void expect_lists_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(close(values(got[i]), values(want[i]), 1e-5)) << what << "[" << i << "] " << want[i].describe();
  }
}

struct SgdCase {
  std::string name;
  SgdParams params;
  bool first_step_then_not;  // step 1 has first_step set (momentum buffers start unset)
};

void run_sgd_case(const SgdCase& sc, const std::vector<ParamShape>& shapes) {
  SCOPED_TRACE(sc.name);
  Contexts c;
  std::vector<Tensor> w = random_list(shapes, 1000), v = random_list(shapes, 2000);
  std::vector<Tensor> gw = to_gpu(w), gv = to_gpu(v);
  const bool momentum = sc.params.momentum != 0.0f;
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> dw = random_list(shapes, 3000 + 100 * static_cast<uint64_t>(step));
    SgdParams p = sc.params;
    p.first_step = sc.first_step_then_not && step == 0;
    sgd_update(c.cpu, p, w, dw, momentum ? v : std::vector<Tensor>{});
    sgd_update(c.gpu, p, gw, to_gpu(dw), momentum ? gv : std::vector<Tensor>{});
  }
  expect_lists_close(gw, w, "w");
  if (momentum) expect_lists_close(gv, v, "v");
}

std::vector<SgdCase> sgd_cases() {
  return {
      {"plain", {.lr = 0.1f}, false},
      {"weight decay", {.lr = 0.05f, .weight_decay = 0.01f}, false},
      {"momentum, first step", {.lr = 0.1f, .momentum = 0.9f}, true},
      {"momentum, dampening, weight decay, buffers already set",
       {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 1e-3f}, false},
      {"nesterov, weight decay, first step",
       {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = true}, true},
  };
}

TEST(OptimizerGpu, SgdOver37OddTensorsMatchesCpu) {
  TANDEM_REQUIRE_GPU();
  for (const SgdCase& sc : sgd_cases()) run_sgd_case(sc, odd_shapes());
}

TEST(OptimizerGpu, SgdOverMoreTensorsThanOneLaunchPacksMatchesCpu) {
  TANDEM_REQUIRE_GPU();
  for (const SgdCase& sc : sgd_cases()) run_sgd_case(sc, many_small_shapes(250));
}

void run_adamw(const std::vector<ParamShape>& shapes) {
  Contexts c;
  std::vector<Tensor> w = random_list(shapes, 1000), m, v;
  for (const ParamShape& s : shapes) {
    m.push_back(Tensor::zeros(s.shape, DType::kF32, Device::cpu(), s.format));
    v.push_back(Tensor::zeros(s.shape, DType::kF32, Device::cpu(), s.format));
  }
  std::vector<Tensor> gw = to_gpu(w), gm = to_gpu(m), gv = to_gpu(v);
  for (int64_t step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<Tensor> dw = random_list(shapes, 3000 + 100 * static_cast<uint64_t>(step));
    AdamWParams p{.lr = 1e-2f, .weight_decay = 0.1f, .step = step};
    adamw_update(c.cpu, p, w, dw, m, v);
    adamw_update(c.gpu, p, gw, to_gpu(dw), gm, gv);
    expect_lists_close(gw, w, "w");
    expect_lists_close(gm, m, "m");
    expect_lists_close(gv, v, "v");
  }
}

TEST(OptimizerGpu, AdamWOver37OddTensorsMatchesCpu) {
  TANDEM_REQUIRE_GPU();
  run_adamw(odd_shapes());
}

TEST(OptimizerGpu, AdamWOverMoreTensorsThanOneLaunchPacksMatchesCpu) {
  TANDEM_REQUIRE_GPU();
  run_adamw(many_small_shapes(250));
}

// Bf16 shadows on every other tensor (null entries between them in the pack): after each update a
// shadow holds the bits of rounding its updated weight afresh (round_to_bf16 on the same GPU), and
// the weights are bitwise those of the same update without shadows.
std::vector<uint16_t> bf16_bits(const Tensor& t) {
  Tensor host = t.to(Device::cpu());
  std::vector<uint16_t> out(static_cast<size_t>(host.numel()));
  std::memcpy(out.data(), host.raw_data(), out.size() * sizeof(uint16_t));
  return out;
}

void expect_fresh_shadows(ExecutionContext& gpu, const std::vector<Tensor>& gw, const std::vector<Tensor>& shadows) {
  for (size_t i = 0; i < gw.size(); ++i) {
    if (!shadows[i].defined()) continue;
    Tensor fresh = Tensor::empty(gw[i].shape(), DType::kBF16, kGpu, gw[i].format());
    round_to_bf16(gpu, gw[i], fresh);
    EXPECT_EQ(bf16_bits(shadows[i]), bf16_bits(fresh)) << "shadow of w[" << i << "] " << gw[i].describe();
  }
}

void run_shadowed_updates(const std::vector<ParamShape>& shapes) {
  Contexts c;
  std::vector<Tensor> w = to_gpu(random_list(shapes, 1000)), plain, shadows, m, v, pm, pv;
  for (size_t i = 0; i < shapes.size(); ++i) {
    plain.push_back(w[i].clone());
    shadows.push_back(i % 2 == 0 ? Tensor::empty(shapes[i].shape, DType::kBF16, kGpu, shapes[i].format) : Tensor());
    for (auto* list : {&m, &v, &pm, &pv}) list->push_back(Tensor::zeros(shapes[i].shape, DType::kF32, kGpu, shapes[i].format));
  }
  for (int64_t step = 1; step <= 2; ++step) {
    SCOPED_TRACE("adamw step " + std::to_string(step));
    std::vector<Tensor> dw = to_gpu(random_list(shapes, 3000 + 100 * static_cast<uint64_t>(step)));
    AdamWParams p{.lr = 1e-2f, .weight_decay = 0.1f, .step = step};
    adamw_update(c.gpu, p, w, dw, m, v, shadows);
    adamw_update(c.gpu, p, plain, dw, pm, pv);
    expect_fresh_shadows(c.gpu, w, shadows);
  }
  SgdParams sp{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = true, .first_step = true};
  std::vector<Tensor> dw = to_gpu(random_list(shapes, 5000));
  sgd_update(c.gpu, sp, w, dw, m, shadows);
  sgd_update(c.gpu, sp, plain, dw, pm);
  expect_fresh_shadows(c.gpu, w, shadows);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(values(w[i]), values(plain[i])) << "w[" << i << "]";
}

TEST(OptimizerGpu, SgdAndAdamWWriteEachBf16ShadowAsAFreshRoundingOfTheUpdatedWeight) {
  TANDEM_REQUIRE_GPU();
  run_shadowed_updates(odd_shapes());
  run_shadowed_updates(many_small_shapes(250));
}

TEST(OptimizerGpu, SquaredNormMatchesCpuAndIsBitwiseRepeatable) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  for (const auto& shapes : {odd_shapes(), many_small_shapes(400)}) {
    std::vector<Tensor> x = random_list(shapes, 50);
    std::vector<Tensor> gx = to_gpu(x);
    const double want = global_norm(c.cpu, x);
    const double first = global_norm(c.gpu, gx);
    EXPECT_NEAR(first, want, 1e-6 * want);
    EXPECT_EQ(global_norm(c.gpu, gx), first);  // bitwise: a fixed reduction order, no atomics
  }
}

TEST(OptimizerGpu, SquaredNormOfNothingIsZero) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  EXPECT_EQ(global_norm(c.gpu, {}), 0.0);
  EXPECT_EQ(global_norm(c.gpu, {Tensor::empty({0}, DType::kF32, kGpu)}), 0.0);
}

// Clipping reads the norm on the device. Above the limit the scaled gradients match the CPU's (the
// norms may differ in their last bits, summed in other orders); under it nothing changes at all.
TEST(OptimizerGpu, ClipByGlobalNormMatchesCpuWithoutReadingBack) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  std::vector<Tensor> x = random_list(odd_shapes(), 70);
  std::vector<Tensor> gx = to_gpu(x);
  clip_by_global_norm(c.cpu, x, squared_norm(c.cpu, x), 0.5);
  clip_by_global_norm(c.gpu, gx, squared_norm(c.gpu, gx), 0.5);
  expect_lists_close(gx, x, "clipped");
  EXPECT_NEAR(global_norm(c.gpu, gx), 0.5, 1e-5);

  std::vector<Tensor> y = random_list(odd_shapes(), 71);
  std::vector<Tensor> gy = to_gpu(y);
  clip_by_global_norm(c.gpu, gy, squared_norm(c.gpu, gy), 1e6);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(values(gy[i]), values(y[i])) << "tensor " << i;
}

}  // namespace
}  // namespace tandem::backend
