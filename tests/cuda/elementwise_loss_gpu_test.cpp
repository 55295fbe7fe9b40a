// The CUDA elementwise ops, sum, broadcast_scalar, softmax cross-entropy, classification stats and
// dropout against the CPU backend on the same random inputs, through ops.h as the engine calls them:
// odd sizes (1, 7, 1000003 elements), both memory formats for 4-D tensors, labels outside the
// classes (NaN rows, no crash), bitwise-repeatable sums and seeded dropout masks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/core/context.h"
#include "engine/core/random.h"
#include "engine/core/tensor.h"
#include "tests/cuda/cuda_test_util.h"

namespace tandem::backend {
namespace {

const Device kGpu = Device::cuda(0);

std::vector<float> random_floats(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = g.uniform(lo, hi);
  return v;
}

// A CPU tensor of `values` (logical order) laid out in `format`.
Tensor host_tensor(const std::vector<float>& values, const Shape& shape,
                   MemoryFormat format = MemoryFormat::kContiguous) {
  Tensor t = Tensor::from_vector(values, shape);
  return format == MemoryFormat::kContiguous ? t : t.to_format(format);
}

Tensor labels_tensor(const std::vector<int64_t>& labels) {
  Tensor t = Tensor::empty({static_cast<int64_t>(labels.size())}, DType::kI64);
  std::copy(labels.begin(), labels.end(), t.data<int64_t>());
  return t;
}

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to_vector(); }

// Storage order, for the flat ops whose result does not depend on the format.
template <typename T>
std::vector<T> storage(const Tensor& t) {
  Tensor h = t.to(Device::cpu());
  const T* p = h.data<T>();
  return std::vector<T>(p, p + h.numel());
}

// Every element within rel * (1 + |want|); names the first that is not.
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

struct Contexts {
  ExecutionContext cpu{Device::cpu(), 2, 1};
  ExecutionContext gpu{kGpu, 0, 1};
};

struct Case {
  Shape shape;
  MemoryFormat format;
  std::string name() const { return shape.str() + " " + std::string(memory_format_name(format)); }
};

std::vector<Case> elementwise_cases() {
  return {{{1}, MemoryFormat::kContiguous},
          {{7}, MemoryFormat::kContiguous},
          {{1000003}, MemoryFormat::kContiguous},
          {{3, 5, 7, 7}, MemoryFormat::kContiguous},
          {{3, 5, 7, 7}, MemoryFormat::kChannelsLast},
          {{1, 3, 1, 1}, MemoryFormat::kChannelsLast}};
}

TEST(CudaElementwise, MatchesTheCpuBackend) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  ContextBinding bind(c.gpu);
  uint64_t seed = 10;
  for (const Case& k : elementwise_cases()) {
    SCOPED_TRACE(k.name());
    int64_t n = k.shape.numel();
    Tensor a = host_tensor(random_floats(n, ++seed), k.shape, k.format);
    Tensor b = host_tensor(random_floats(n, ++seed), k.shape, k.format);
    Tensor ga = a.to(kGpu), gb = b.to(kGpu);

    Tensor y = relu_forward(c.gpu, ga);
    EXPECT_EQ(y.format(), k.format);
    EXPECT_TRUE(close(values(y), values(relu_forward(c.cpu, a)), 0.0));
    Tensor dx = relu_backward(c.gpu, y, gb);
    EXPECT_TRUE(close(values(dx), values(relu_backward(c.cpu, relu_forward(c.cpu, a), b)), 0.0));
    EXPECT_TRUE(close(values(add(c.gpu, ga, gb)), values(add(c.cpu, a, b)), 0.0));
    EXPECT_TRUE(close(values(add_relu(c.gpu, ga, gb)), values(add_relu(c.cpu, a, b)), 0.0));
    EXPECT_TRUE(close(values(mul(c.gpu, ga, gb)), values(mul(c.cpu, a, b)), 0.0));
    EXPECT_TRUE(close(values(scale(c.gpu, ga, -1.75f)), values(scale(c.cpu, a, -1.75f)), 0.0));

    Tensor acc = b.clone(), gacc = b.to(kGpu);
    axpy(c.cpu, 0.3f, a, acc);
    axpy(c.gpu, 0.3f, ga, gacc);
    EXPECT_TRUE(close(values(gacc), values(acc), 1e-6));  // the CPU compiler may fuse to an FMA

    Tensor filled = Tensor::empty(k.shape, DType::kF32, kGpu, k.format);
    fill(c.gpu, 3.25f, filled);
    EXPECT_TRUE(close(values(filled), std::vector<float>(static_cast<size_t>(n), 3.25f), 0.0));

    Tensor s = Tensor::from_vector({-0.625f}, Shape()).to(kGpu);
    Tensor broadcast = broadcast_scalar(c.gpu, s, k.shape, k.format);
    EXPECT_EQ(broadcast.format(), k.format);
    EXPECT_TRUE(close(values(broadcast), std::vector<float>(static_cast<size_t>(n), -0.625f), 0.0));
  }
}

TEST(CudaElementwise, ReluLetsNanThrough) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  ContextBinding bind(c.gpu);
  Tensor x = Tensor::from_vector({-1.0f, NAN, 2.0f}, {3}).to(kGpu);
  std::vector<float> y = values(relu_forward(c.gpu, x));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], 2.0f);
}

TEST(CudaSum, MatchesTheCpuBackendAndRepeatsBitwise) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  ContextBinding bind(c.gpu);
  uint64_t seed = 40;
  for (const Case& k : elementwise_cases()) {
    SCOPED_TRACE(k.name());
    int64_t n = k.shape.numel();
    // Mostly positive, so the sum is large and float accumulation would visibly lose digits.
    Tensor x = host_tensor(random_floats(n, ++seed, -0.25f, 1.0f), k.shape, k.format);
    Tensor gx = x.to(kGpu);
    Tensor first = sum(c.gpu, gx);
    Tensor second = sum(c.gpu, gx);
    EXPECT_EQ(first.rank(), 0);
    float f = values(first)[0], g = values(second)[0], want = values(sum(c.cpu, x))[0];
    EXPECT_EQ(std::memcmp(&f, &g, sizeof f), 0) << f << " vs " << g;
    EXPECT_NEAR(f, want, 1e-6 * (1.0 + std::abs(want)));
    // The backward of the sum: the value spread without leaving the device.
    Tensor spread = broadcast_scalar(c.gpu, first, k.shape, k.format);
    EXPECT_TRUE(close(values(spread), std::vector<float>(static_cast<size_t>(n), f), 0.0));
  }
}

struct SoftmaxCase {
  int64_t n, k;
  float smoothing;
};

class CudaSoftmaxCrossEntropy : public ::testing::TestWithParam<SoftmaxCase> {};

TEST_P(CudaSoftmaxCrossEntropy, MatchesTheCpuBackend) {
  TANDEM_REQUIRE_GPU();
  const SoftmaxCase p = GetParam();
  Contexts c;
  ContextBinding bind(c.gpu);
  Tensor z = host_tensor(random_floats(p.n * p.k, 7, -4.0f, 4.0f), {p.n, p.k});
  Generator g(8);
  std::vector<int64_t> l(static_cast<size_t>(p.n));
  for (int64_t& v : l) v = static_cast<int64_t>(g.below(static_cast<uint64_t>(p.k)));
  Tensor labels = labels_tensor(l), glabels = labels.to(kGpu);

  SoftmaxCrossEntropyForward want = softmax_cross_entropy_forward(c.cpu, z, labels, p.smoothing);
  SoftmaxCrossEntropyForward got = softmax_cross_entropy_forward(c.gpu, z.to(kGpu), glabels, p.smoothing);
  EXPECT_TRUE(close(values(got.loss), values(want.loss), 1e-5));
  EXPECT_TRUE(close(values(got.probs), values(want.probs), 1e-5));

  // The backward from the same probabilities, so only the gradient kernel is compared.
  Tensor dloss = host_tensor(random_floats(p.n, 9), {p.n});
  Tensor dz = softmax_cross_entropy_backward(c.gpu, want.probs.to(kGpu), glabels, p.smoothing, dloss.to(kGpu));
  EXPECT_TRUE(close(values(dz), values(softmax_cross_entropy_backward(c.cpu, want.probs, labels, p.smoothing, dloss)),
                    1e-6));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaSoftmaxCrossEntropy,
                         ::testing::Values(SoftmaxCase{1, 1, 0.0f}, SoftmaxCase{1, 1, 0.1f}, SoftmaxCase{1, 10, 0.0f},
                                           SoftmaxCase{1, 10, 0.1f}, SoftmaxCase{7, 10, 0.0f},
                                           SoftmaxCase{7, 10, 0.1f}, SoftmaxCase{5, 1, 0.1f},
                                           SoftmaxCase{333, 10, 0.1f}, SoftmaxCase{64, 1000, 0.0f},
                                           SoftmaxCase{64, 1000, 0.1f}));

TEST(CudaSoftmaxCrossEntropyLabels, OutOfRangeLabelGivesNanRowsAndNoCrash) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  ContextBinding bind(c.gpu);
  const int64_t n = 5, k = 10;
  Tensor z = host_tensor(random_floats(n * k, 11, -3.0f, 3.0f), {n, k});
  std::vector<int64_t> bad{3, 10, -1, int64_t{1} << 40, 9};
  std::vector<int64_t> fixed{3, 0, 0, 0, 9};  // the CPU rejects bad labels, so it sees valid ones
  Tensor gbad = labels_tensor(bad).to(kGpu);
  SoftmaxCrossEntropyForward got = softmax_cross_entropy_forward(c.gpu, z.to(kGpu), gbad, 0.1f);
  SoftmaxCrossEntropyForward want = softmax_cross_entropy_forward(c.cpu, z, labels_tensor(fixed), 0.1f);
  std::vector<float> loss = values(got.loss), ref = values(want.loss);
  for (int64_t i = 0; i < n; ++i) {
    bool valid = bad[static_cast<size_t>(i)] >= 0 && bad[static_cast<size_t>(i)] < k;
    if (valid) {
      EXPECT_NEAR(loss[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], 1e-5) << i;
    } else {
      EXPECT_TRUE(std::isnan(loss[static_cast<size_t>(i)])) << i;
    }
  }
  EXPECT_TRUE(close(values(got.probs), values(want.probs), 1e-5));  // probabilities need no label

  Tensor dloss = host_tensor(std::vector<float>(static_cast<size_t>(n), 1.0f), {n}).to(kGpu);
  std::vector<float> dz = values(softmax_cross_entropy_backward(c.gpu, got.probs, gbad, 0.1f, dloss));
  for (int64_t i = 0; i < n; ++i) {
    bool valid = bad[static_cast<size_t>(i)] >= 0 && bad[static_cast<size_t>(i)] < k;
    for (int64_t j = 0; j < k; ++j) {
      float v = dz[static_cast<size_t>(i * k + j)];
      EXPECT_EQ(std::isnan(v), !valid) << i << ", " << j;
    }
  }
  // The context still works: a kernel fault would surface here as an error.
  EXPECT_NO_THROW(values(sum(c.gpu, got.probs)));
}

TEST(CudaClassificationStats, AccumulatesOverTwoCallsAsTheCpuBackend) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  ContextBinding bind(c.gpu);
  Tensor stats = Tensor::zeros({3});
  Tensor gstats = stats.to(kGpu);
  struct Call {
    int64_t n, k;
    float loss, scale;
  };
  uint64_t seed = 60;
  for (Call call : {Call{1000, 10, 2.5f, 0.5f}, Call{37, 1000, 1.25f, 4.0f}, Call{1, 1, 0.75f, 1.0f}}) {
    // Whole numbers in [0, 3) make ties common: a tie counts for the label.
    std::vector<float> zv = random_floats(call.n * call.k, ++seed, 0.0f, 3.0f);
    for (float& v : zv) v = std::floor(v);
    Generator g(++seed);
    std::vector<int64_t> l(static_cast<size_t>(call.n));
    for (int64_t& v : l) v = static_cast<int64_t>(g.below(static_cast<uint64_t>(call.k)));
    if (call.n > 7) {
      l[5] = call.k;  // outside the classes: counts as wrong
      l[6] = -3;
      // A NaN logit (the label's, or another's) makes the row wrong, however the others compare.
      zv[static_cast<size_t>(3 * call.k + l[3])] = std::numeric_limits<float>::quiet_NaN();
      zv[static_cast<size_t>(4 * call.k + (l[4] + 1) % call.k)] = std::numeric_limits<float>::quiet_NaN();
    }
    Tensor z = host_tensor(zv, {call.n, call.k});
    Tensor labels = labels_tensor(l);
    Tensor loss = Tensor::from_vector({call.loss}, Shape());
    accumulate_classification_stats(c.cpu, loss, call.scale, z, labels, stats);
    accumulate_classification_stats(c.gpu, loss.to(kGpu), call.scale, z.to(kGpu), labels.to(kGpu), gstats);
    std::vector<float> got = values(gstats), want = values(stats);
    SCOPED_TRACE(std::to_string(call.n) + " x " + std::to_string(call.k));
    EXPECT_NEAR(got[0], want[0], 1e-6 * (1.0 + std::abs(want[0])));
    EXPECT_EQ(got[1], want[1]);
    EXPECT_EQ(got[2], want[2]);
  }
  EXPECT_EQ(values(gstats)[2], 1038.0f);
}

float kept_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

// y and dx follow the mask exactly: kept elements scaled by 1 / (1 - p), dropped ones zero.
void expect_consistent(const Tensor& x, const DropoutForward& f, const Tensor& dy, const Tensor& dx, float p) {
  std::vector<float> xs = storage<float>(x), ys = storage<float>(f.y), dys = storage<float>(dy),
                     dxs = storage<float>(dx);
  std::vector<uint8_t> m = storage<uint8_t>(f.mask);
  float scale = kept_scale(p);
  size_t bad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    bool kept = m[i] != 0;
    bool ok = m[i] <= 1 && ys[i] == (kept ? xs[i] * scale : 0.0f) && dxs[i] == (kept ? dys[i] * scale : 0.0f);
    if (!ok && bad++ < 5) {
      ADD_FAILURE() << "element " << i << ": mask " << int{m[i]} << " x " << xs[i] << " y " << ys[i] << " dy "
                    << dys[i] << " dx " << dxs[i];
    }
  }
  EXPECT_EQ(bad, 0u);
}

double kept_fraction(const Tensor& mask) {
  std::vector<uint8_t> m = storage<uint8_t>(mask);
  double kept = 0;
  for (uint8_t v : m) kept += v;
  return kept / static_cast<double>(m.size());
}

// The mask the kernel must draw (cuda_loss.cu): the seed is the context generator's next u64, and
// element i takes number i of Generator(seed, 0), dropped when its uniform is below p.
std::vector<uint8_t> expected_mask(const Generator& before, int64_t n, float p) {
  Generator ctx_gen = before;
  Generator g(p > 0.0f ? ctx_gen.next_u64() : 0, 0);
  std::vector<uint8_t> m(static_cast<size_t>(n));
  for (uint8_t& v : m) v = g.uniform() < p ? 0 : 1;
  return m;
}

TEST(CudaDropout, KeepsAboutOneMinusPAndBackwardFollowsTheMask) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  ContextBinding bind(c.gpu);
  const int64_t n = 1000000;
  const float p = 0.3f;
  Tensor x = host_tensor(random_floats(n, 70), {n}).to(kGpu);
  Tensor dy = host_tensor(random_floats(n, 71), {n}).to(kGpu);
  Generator before = c.gpu.generator();
  DropoutForward f = dropout_forward(c.gpu, x, p);
  EXPECT_NEAR(kept_fraction(f.mask), 1.0 - p, 0.003);  // about 6.5 standard deviations
  EXPECT_TRUE(storage<uint8_t>(f.mask) == expected_mask(before, n, p));
  expect_consistent(x, f, dy, dropout_backward(c.gpu, dy, f.mask, p), p);
}

TEST(CudaDropout, SameSeedSameMaskNextCallAnother) {
  TANDEM_REQUIRE_GPU();
  // No binding: the implicit copies then wait for the whole device, so both contexts' work is done.
  ExecutionContext one(kGpu, 0, 123), two(kGpu, 0, 123);
  Tensor x = host_tensor(random_floats(4099, 72), {4099}).to(kGpu);
  std::vector<uint8_t> a = storage<uint8_t>(dropout_forward(one, x, 0.5f).mask);
  std::vector<uint8_t> b = storage<uint8_t>(dropout_forward(two, x, 0.5f).mask);
  std::vector<uint8_t> next = storage<uint8_t>(dropout_forward(one, x, 0.5f).mask);
  EXPECT_TRUE(a == b);  // not EXPECT_EQ: a failure would print 4099 bytes twice
  EXPECT_TRUE(a != next);
}

TEST(CudaDropout, OddSizesBothFormatsAndTheEdgesOfP) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  ContextBinding bind(c.gpu);
  uint64_t seed = 80;
  for (const Case& k : elementwise_cases()) {
    for (float p : {0.0f, 0.5f, 1.0f}) {
      SCOPED_TRACE(k.name() + " p=" + std::to_string(p));
      int64_t n = k.shape.numel();
      Tensor x = host_tensor(random_floats(n, ++seed), k.shape, k.format).to(kGpu);
      Tensor dy = host_tensor(random_floats(n, ++seed), k.shape, k.format).to(kGpu);
      Generator before = c.gpu.generator();
      DropoutForward f = dropout_forward(c.gpu, x, p);
      EXPECT_TRUE(storage<uint8_t>(f.mask) == expected_mask(before, n, p));
      EXPECT_EQ(f.y.format(), k.format);
      EXPECT_EQ(f.mask.format(), k.format);
      expect_consistent(x, f, dy, dropout_backward(c.gpu, dy, f.mask, p), p);
      if (p == 0.0f) {
        EXPECT_EQ(kept_fraction(f.mask), 1.0);
      } else if (p == 1.0f) {
        EXPECT_EQ(kept_fraction(f.mask), 0.0);
      }
    }
  }
}

}  // namespace
}  // namespace tandem::backend
