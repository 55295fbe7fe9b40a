// The two CUDA kernels of the fused classifier against the CPU backend: softmax cross-entropy's
// forward and backward in one pass in place (a block per row; rows of 1 to 50,257 classes, label
// smoothing, ignored rows, labels outside the classes), and the weight gradient added in cuBLASLt's
// GEMM (beta = 1) in f32 and under bf16. Both repeat bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/core/context.h"
#include "engine/core/random.h"
#include "tests/cuda/cuda_test_util.h"

namespace tandem::backend {
namespace {

using tandem::testing::bitwise_equal;
using tandem::testing::gpu;
using tandem::testing::host_values;
using tandem::testing::random_tensor;
using tandem::testing::rel_error;

const Device kGpu = Device::cuda(0);

Tensor labels_of(int64_t rows, int64_t classes, uint64_t seed) {
  Generator g(seed);
  Tensor t = Tensor::empty({rows}, DType::kI64);
  for (int64_t i = 0; i < rows; ++i) t.data<int64_t>()[i] = static_cast<int64_t>(g.next_u64() % classes);
  return t;
}

// x rounded to bf16 and widened back: the operand a bf16 product reads, in f32.
Tensor rounded(Ctx& ctx, const Tensor& x) {
  Tensor half = Tensor::empty(x.shape(), DType::kBF16), back = Tensor::empty(x.shape());
  round_to_bf16(ctx, x, half);
  widen_from_bf16(ctx, half, back);
  return back;
}

struct Contexts {
  ExecutionContext cpu{Device::cpu(), 2, 1};
  ExecutionContext gpu{kGpu, 0, 1};
};

struct XentCase {
  int64_t rows, classes;
  float smoothing, scale;
};

TEST(FusedClassifierGpu, InPlaceCrossEntropyMatchesTheCpu) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  ContextBinding bind(c.gpu);
  uint64_t seed = 1;
  for (const XentCase& k : {XentCase{1, 1, 0.0f, 1.0f}, XentCase{3, 7, 0.1f, 0.25f}, XentCase{70, 255, 0.0f, 1e-3f},
                            XentCase{5, 257, 0.05f, 1.0f}, XentCase{9, 50257, 0.0f, 1.0f / 8192.0f}}) {
    SCOPED_TRACE(std::to_string(k.rows) + " rows of " + std::to_string(k.classes));
    const Tensor z = random_tensor({k.rows, k.classes}, ++seed, -8.0f, 8.0f);
    const Tensor labels = labels_of(k.rows, k.classes, ++seed);
    Tensor want_z = z.clone(), got_z = gpu(z);
    const Tensor want = softmax_cross_entropy_inplace(c.cpu, want_z, labels, k.smoothing, k.scale);
    const Tensor got = softmax_cross_entropy_inplace(c.gpu, got_z, gpu(labels), k.smoothing, k.scale);
    EXPECT_LT(rel_error(got, want), 1e-6) << "loss";
    EXPECT_LT(rel_error(got_z, want_z), 1e-6) << "dlogits";
    // The CPU's in-place pass is its forward then its backward, bit for bit (the formulas are shared).
    const SoftmaxCrossEntropyForward f = softmax_cross_entropy_forward(c.cpu, z, labels, k.smoothing);
    EXPECT_TRUE(bitwise_equal(want, f.loss));
    Tensor dloss = Tensor::empty({k.rows});
    fill(c.cpu, k.scale, dloss);
    EXPECT_TRUE(bitwise_equal(want_z, softmax_cross_entropy_backward(c.cpu, f.probs, labels, k.smoothing, dloss)));
    // Repeatable: the block's sums merge in a fixed order.
    Tensor again_z = gpu(z);
    EXPECT_TRUE(bitwise_equal(softmax_cross_entropy_inplace(c.gpu, again_z, gpu(labels), k.smoothing, k.scale), got));
    EXPECT_TRUE(bitwise_equal(again_z, got_z));
  }
}

TEST(FusedClassifierGpu, IgnoredRowsAreZeroAndBadLabelsAreNanRows) {
  TANDEM_REQUIRE_GPU();
  Contexts c;
  ContextBinding bind(c.gpu);
  const Tensor z = random_tensor({4, 300}, 3);
  Tensor labels = labels_of(4, 300, 4);
  labels.data<int64_t>()[1] = -100;  // ignored
  labels.data<int64_t>()[2] = 300;   // outside the classes: NaN, not a read past the row
  Tensor got_z = gpu(z);
  const std::vector<float> loss =
      host_values(softmax_cross_entropy_inplace(c.gpu, got_z, gpu(labels), 0.1f, 0.5f, -100));
  const std::vector<float> dz = host_values(got_z);
  EXPECT_EQ(loss[1], 0.0f);
  EXPECT_TRUE(std::isnan(loss[2]));
  EXPECT_TRUE(std::isfinite(loss[0]) && std::isfinite(loss[3]));
  for (int64_t j = 0; j < 300; ++j) {
    EXPECT_EQ(dz[static_cast<size_t>(300 + j)], 0.0f);
    EXPECT_TRUE(std::isnan(dz[static_cast<size_t>(600 + j)]));
  }
}

TEST(FusedClassifierGpu, WeightGradientAddsIntoWhatIsThere) {
  TANDEM_REQUIRE_GPU();
  for (Precision precision : {Precision::kF32, Precision::kBf16}) {
    SCOPED_TRACE(std::string(precision_name(precision)));
    Contexts c;
    c.gpu.options().precision = precision;
    ContextBinding bind(c.gpu);
    const Tensor x = random_tensor({67, 48}, 5), dy = random_tensor({67, 301}, 6), dw0 = random_tensor({301, 48}, 7);
    // The CPU reference in f32 on the GPU's operands: rounded to bf16 first where the GPU rounds them.
    const Tensor x_ref = precision == Precision::kBf16 ? rounded(c.cpu, x) : x;
    const Tensor dy_ref = precision == Precision::kBf16 ? rounded(c.cpu, dy) : dy;
    Tensor want = dw0.clone();
    axpy(c.cpu, 1.0f, linear_backward_weights(c.cpu, x_ref, dy_ref, false).dw, want);
    Tensor got = gpu(dw0);
    const Tensor gx = bf16_operand(c.gpu, gpu(x)), gdy = bf16_operand(c.gpu, gpu(dy));
    linear_backward_weights_add(c.gpu, gx, gdy, got);
    EXPECT_LT(rel_error(got, want), 1e-5);
    Tensor again = gpu(dw0);
    linear_backward_weights_add(c.gpu, gx, gdy, again);
    EXPECT_TRUE(bitwise_equal(again, got));
  }
}

}  // namespace
}  // namespace tandem::backend
