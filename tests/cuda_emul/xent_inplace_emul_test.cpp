// The fused classifier's CUDA pass (cuda_xent_inplace.cu), its real source run by the CPU emulator
// against a double-precision reference: the loss and the gradient left in place of the logits, for
// rows shorter than the block and far longer (GPT-2's 50,257 classes), label smoothing, an ignored
// row (zeros) and a label outside the classes (a NaN row, nothing written outside the buffers). Two
// runs give the same bits: the block's sums merge in a fixed order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_xent_inplace.h"
#include "tests/cuda_emul/emul_test_util.h"

namespace tandem::emul_test {
namespace {

constexpr int64_t kIgnore = -100;

struct Case {
  int64_t rows, classes;
  float smoothing, scale;
};

struct Result {
  std::vector<float> loss, dz;
};

// Uniform values in [-8, 8) and labels in [0, classes), from a fixed linear congruential sequence.
struct Inputs {
  std::vector<float> z;
  std::vector<int64_t> labels;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  Inputs in;
  uint64_t s = seed;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 11;
  };
  in.z.resize(static_cast<size_t>(c.rows * c.classes));
  for (float& v : in.z) v = static_cast<float>(static_cast<double>(next()) / 9007199254740992.0 * 16.0 - 8.0);
  for (int64_t i = 0; i < c.rows; ++i) in.labels.push_back(static_cast<int64_t>(next() % c.classes));
  return in;
}

Result run(const Case& c, const Inputs& in) {
  DeviceBuffer<float> z(in.z.size()), loss(static_cast<size_t>(c.rows), -1.0f);
  DeviceBuffer<int64_t> labels(in.labels.size());
  for (size_t i = 0; i < in.z.size(); ++i) z.data()[i] = in.z[i];
  for (size_t i = 0; i < in.labels.size(); ++i) labels.data()[i] = in.labels[i];
  backend::cuda::launch_softmax_xent_inplace(
      {z.data(), labels.data(), c.rows, c.classes, c.smoothing, kIgnore, c.scale, loss.data()}, nullptr);
  EXPECT_TRUE(z.canaries_intact() && loss.canaries_intact() && labels.canaries_intact());
  return {loss.values(), z.values()};
}

// loss = lse - (1 - s) z_label - s / K sum z; dz_j = scale (softmax_j - target_j), in double.
Result reference(const Case& c, const Inputs& in) {
  Result r;
  for (int64_t i = 0; i < c.rows; ++i) {
    const float* z = in.z.data() + i * c.classes;
    const int64_t label = in.labels[static_cast<size_t>(i)];
    if (label == kIgnore) {
      r.loss.push_back(0.0f);
      r.dz.insert(r.dz.end(), static_cast<size_t>(c.classes), 0.0f);
      continue;
    }
    if (label < 0 || label >= c.classes) {
      r.loss.push_back(NAN);
      r.dz.insert(r.dz.end(), static_cast<size_t>(c.classes), NAN);
      continue;
    }
    double max = -INFINITY, sum = 0.0, sum_z = 0.0;
    for (int64_t j = 0; j < c.classes; ++j) max = std::max(max, static_cast<double>(z[j]));
    for (int64_t j = 0; j < c.classes; ++j) {
      sum += std::exp(z[j] - max);
      sum_z += z[j];
    }
    const double lse = max + std::log(sum), s = c.smoothing, k = static_cast<double>(c.classes);
    r.loss.push_back(static_cast<float>(lse - (1.0 - s) * z[label] - s / k * sum_z));
    for (int64_t j = 0; j < c.classes; ++j) {
      const double target = (j == label ? 1.0 - s : 0.0) + s / k;
      r.dz.push_back(static_cast<float>(c.scale * (std::exp(z[j] - lse) - target)));
    }
  }
  return r;
}

// Every element within tolerance * (largest |want|), NaN exactly where want is NaN.
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " vs " << want.size();
  double scale = 1e-30;
  for (float w : want) scale = std::isnan(w) ? scale : std::max(scale, std::fabs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) != std::isnan(got[i]) ||
        (!std::isnan(want[i]) && std::fabs(static_cast<double>(got[i]) - want[i]) > tolerance * scale)) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(XentInplaceEmul, MatchesADoubleReference) {
  uint64_t seed = 1;
  for (const Case& c : {Case{1, 1, 0.0f, 1.0f}, Case{3, 7, 0.1f, 0.25f}, Case{4, 255, 0.0f, 1.0f},
                        Case{2, 257, 0.05f, 1e-3f}, Case{3, 50257, 0.1f, 1.0f / 8192.0f}}) {
    SCOPED_TRACE(std::to_string(c.rows) + " rows of " + std::to_string(c.classes));
    const Inputs in = make_inputs(c, ++seed);
    const Result got = run(c, in), want = reference(c, in);
    EXPECT_TRUE(close(got.loss, want.loss, 1e-6)) << "loss";
    EXPECT_TRUE(close(got.dz, want.dz, 1e-6)) << "gradient";
    const Result again = run(c, in);
    EXPECT_TRUE(same_bits(again.loss, got.loss) && same_bits(again.dz, got.dz)) << "two runs differ";
  }
}

TEST(XentInplaceEmul, IgnoredRowsAreZerosAndLabelsOutsideTheClassesAreNanRows) {
  const Case c{5, 300, 0.1f, 0.5f};
  Inputs in = make_inputs(c, 42);
  in.labels[1] = kIgnore;
  in.labels[2] = 300;
  in.labels[3] = -1;
  const Result got = run(c, in), want = reference(c, in);
  EXPECT_EQ(got.loss[1], 0.0f);
  EXPECT_TRUE(std::isnan(got.loss[2]) && std::isnan(got.loss[3]));
  EXPECT_TRUE(close(got.loss, want.loss, 1e-6));
  EXPECT_TRUE(close(got.dz, want.dz, 1e-6));
}

}  // namespace
}  // namespace tandem::emul_test
