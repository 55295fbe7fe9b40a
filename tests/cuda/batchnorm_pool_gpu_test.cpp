// The CUDA batch norm and pooling kernels against the CPU backend on random inputs: training
// (two steps, so the running averages are checked after updating twice), inference, backward
// (dx, dgamma, dbeta), the fused ReLU on and off, in both memory formats and at awkward sizes
// (batch 1, 3 and 5 channels, 1x1 planes; 8 channels in NHWC reach cuDNN's fused BN+ReLU). Max
// and average pooling forward and backward with strides, padding and count_include_pad both
// ways, global average pooling, the deterministic max pool repeating bit for bit, and the block
// end relu(bn(x) + shortcut) against the CPU and the unfused pair.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/backend/ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace tandem::backend {
namespace {

constexpr double kTolerance = 1e-4;  // fp32: batch norm and pooling do not use tensor cores

using tandem::testing::bitwise_equal;
using tandem::testing::gpu;
using tandem::testing::random_tensor;
using tandem::testing::rel_error;

std::string format_name(MemoryFormat f) { return std::string(memory_format_name(f)); }

// ---------------------------------------------------------------------------------------------
// Batch norm

struct BnCase {
  Shape x;
  bool relu;
};

class BatchNormGpuTest : public ::testing::TestWithParam<std::tuple<BnCase, MemoryFormat>> {};

TEST_P(BatchNormGpuTest, TrainingInferenceAndBackwardMatchTheCpu) {
  TANDEM_REQUIRE_GPU();
  const auto& [c, format] = GetParam();
  SCOPED_TRACE("x=" + c.x.str() + " format=" + format_name(format) + (c.relu ? " relu" : ""));
  ExecutionContext cpu_ctx(Device::cpu(), 2, 1);
  ExecutionContext gpu_ctx(Device::cuda(0));
  int64_t ch = c.x[1];
  BatchNormParams p;
  p.eps = 1e-3f;
  p.momentum = 0.2f;
  p.fuse_relu = c.relu;
  Tensor gamma = random_tensor({ch}, 1, 0.5f, 1.5f), beta = random_tensor({ch}, 2);
  Tensor rm = random_tensor({ch}, 3), rv = random_tensor({ch}, 4, 0.5f, 2.0f);
  Tensor g_gamma = gpu(gamma), g_beta = gpu(beta), g_rm = gpu(rm), g_rv = gpu(rv);

  BatchNormForward f, gf;
  Tensor x;
  for (uint64_t step = 0; step < 2; ++step) {  // two updates of the running averages
    SCOPED_TRACE("step " + std::to_string(step));
    x = random_tensor(c.x, 10 + step, -2.0f, 3.0f, format);
    f = batchnorm_forward_training(cpu_ctx, p, x, gamma, beta, rm, rv);
    gf = batchnorm_forward_training(gpu_ctx, p, gpu(x), g_gamma, g_beta, g_rm, g_rv);
    EXPECT_EQ(gf.y.format(), format);
    EXPECT_LT(rel_error(gf.y, f.y), kTolerance);
    EXPECT_LT(rel_error(gf.saved.mean, f.saved.mean), kTolerance);
    EXPECT_LT(rel_error(gf.saved.invstd, f.saved.invstd), kTolerance);
    EXPECT_LT(rel_error(g_rm, rm), kTolerance);
    EXPECT_LT(rel_error(g_rv, rv), kTolerance);  // unbiased variance, momentum as PyTorch
  }

  // Which call ran is cuDNN's choice: say it, so a GPU run shows it. A defined workspace means the
  // forward went through an Ex call (its reserve space), which serves NHWC only; the H200 run of
  // 2026-12-04 took it for every NHWC shape here, f32 never fused with the ReLU.
  std::printf("[   INFO   ] x=%s %s%s: %s\n", c.x.str().c_str(), format_name(format).c_str(), c.relu ? " +ReLU" : "",
              gf.saved.workspace.defined() ? "cuDNN's Ex call" : "the v7 call");
  if (format == MemoryFormat::kContiguous) {
    EXPECT_FALSE(gf.saved.workspace.defined());
  }

  Tensor dy = random_tensor(c.x, 20, -1.0f, 1.0f, format);
  BatchNormGrads g = batchnorm_backward(cpu_ctx, p, x, f.y, dy, gamma, f.saved);
  Tensor g_x = gpu(x), g_dy = gpu(dy);
  for (int round = 0; round < 2; ++round) {  // a second round catches dgamma/dbeta accumulating
    SCOPED_TRACE("backward round " + std::to_string(round));
    BatchNormGrads gg = batchnorm_backward(gpu_ctx, p, g_x, gf.y, g_dy, g_gamma, gf.saved);
    EXPECT_EQ(gg.dx.format(), format);
    EXPECT_LT(rel_error(gg.dx, g.dx), kTolerance);
    EXPECT_LT(rel_error(gg.dgamma, g.dgamma), kTolerance);
    EXPECT_LT(rel_error(gg.dbeta, g.dbeta), kTolerance);
  }

  Tensor yi = batchnorm_forward_inference(cpu_ctx, p, x, gamma, beta, rm, rv);
  Tensor gyi = batchnorm_forward_inference(gpu_ctx, p, g_x, g_gamma, g_beta, g_rm, g_rv);
  EXPECT_EQ(gyi.format(), format);
  EXPECT_LT(rel_error(gyi, yi), kTolerance);
}

std::vector<BnCase> bn_cases() {
  return {{{1, 3, 7, 7}, false}, {{1, 3, 7, 7}, true},  {{2, 5, 7, 7}, false}, {{2, 5, 7, 7}, true},
          {{4, 5, 1, 1}, false}, {{3, 3, 1, 1}, true},  {{1, 8, 7, 7}, true},  {{2, 8, 5, 5}, false},
          {{4, 16, 6, 5}, true}};
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormGpuTest,
                         ::testing::Combine(::testing::ValuesIn(bn_cases()),
                                            ::testing::Values(MemoryFormat::kContiguous,
                                                              MemoryFormat::kChannelsLast)));

// relu(bn(x) + shortcut): the GPU against the CPU (whose channels_last multiples of 16 run its
// fused AVX-512 kernel), and on the GPU to the bit what batch norm then add_relu give.
class BatchNormAddReluGpuTest : public ::testing::TestWithParam<std::tuple<Shape, MemoryFormat>> {};

TEST_P(BatchNormAddReluGpuTest, MatchesTheCpuAndTheUnfusedPair) {
  TANDEM_REQUIRE_GPU();
  const auto& [shape, format] = GetParam();
  SCOPED_TRACE("x=" + shape.str() + " format=" + format_name(format));
  ExecutionContext cpu_ctx(Device::cpu(), 2, 1);
  ExecutionContext gpu_ctx(Device::cuda(0));
  const int64_t ch = shape[1];
  BatchNormParams p;
  p.momentum = 0.2f;
  Tensor x = random_tensor(shape, 30, -2.0f, 3.0f, format), s = random_tensor(shape, 31, -1.0f, 1.0f, format);
  Tensor gamma = random_tensor({ch}, 32, 0.5f, 1.5f), beta = random_tensor({ch}, 33);
  Tensor rm = random_tensor({ch}, 34), rv = random_tensor({ch}, 35, 0.5f, 2.0f);
  Tensor g_rm = gpu(rm), g_rv = gpu(rv), g_rm_pair = gpu(rm), g_rv_pair = gpu(rv);

  BatchNormForward f = batchnorm_add_relu_forward_training(cpu_ctx, p, x, gamma, beta, s, rm, rv);
  BatchNormForward gf =
      batchnorm_add_relu_forward_training(gpu_ctx, p, gpu(x), gpu(gamma), gpu(beta), gpu(s), g_rm, g_rv);
  EXPECT_EQ(gf.y.format(), format);
  EXPECT_LT(rel_error(gf.y, f.y), kTolerance);
  EXPECT_LT(rel_error(gf.saved.mean, f.saved.mean), kTolerance);
  EXPECT_LT(rel_error(gf.saved.invstd, f.saved.invstd), kTolerance);
  EXPECT_LT(rel_error(g_rm, rm), kTolerance);
  EXPECT_LT(rel_error(g_rv, rv), kTolerance);

  BatchNormForward pair = batchnorm_forward_training(gpu_ctx, p, gpu(x), gpu(gamma), gpu(beta), g_rm_pair, g_rv_pair);
  EXPECT_TRUE(bitwise_equal(gf.y, add_relu(gpu_ctx, pair.y, gpu(s))));
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormAddReluGpuTest,
                         ::testing::Combine(::testing::Values(Shape{2, 16, 6, 5}, Shape{2, 5, 7, 7}),
                                            ::testing::Values(MemoryFormat::kContiguous,
                                                              MemoryFormat::kChannelsLast)));

// ---------------------------------------------------------------------------------------------
// Pooling

struct PoolCase {
  Shape x;
  Pool2dParams p;
};

Pool2dParams pool(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, bool include_pad) {
  Pool2dParams p;
  p.kernel = {kh, kw};
  p.stride = {sh, sw};
  p.padding = {ph, pw};
  p.count_include_pad = include_pad;
  return p;
}

std::string describe(const PoolCase& c) {
  const Pool2dParams& p = c.p;
  return "x=" + c.x.str() + " kernel=" + std::to_string(p.kernel[0]) + "x" + std::to_string(p.kernel[1]) +
         " stride=" + std::to_string(p.stride[0]) + "," + std::to_string(p.stride[1]) +
         " padding=" + std::to_string(p.padding[0]) + "," + std::to_string(p.padding[1]) +
         (p.count_include_pad ? " include_pad" : " exclude_pad");
}

class PoolGpuTest : public ::testing::TestWithParam<std::tuple<PoolCase, MemoryFormat>> {};

TEST_P(PoolGpuTest, MaxAndAverageMatchTheCpu) {
  TANDEM_REQUIRE_GPU();
  const auto& [c, format] = GetParam();
  SCOPED_TRACE(describe(c) + " format=" + format_name(format));
  ExecutionContext cpu_ctx(Device::cpu(), 2, 1);
  ExecutionContext gpu_ctx(Device::cuda(0));
  Shape ys = pool2d_output_shape(c.p, c.x);
  Tensor x = random_tensor(c.x, 31, -1.0f, 1.0f, format), dy = random_tensor(ys, 32, -1.0f, 1.0f, format);
  Tensor g_x = gpu(x), g_dy = gpu(dy);

  MaxPoolForward mf = max_pool2d_forward(cpu_ctx, c.p, x);
  MaxPoolForward gmf = max_pool2d_forward(gpu_ctx, c.p, g_x);
  EXPECT_EQ(gmf.y.format(), format);
  EXPECT_LT(rel_error(gmf.y, mf.y), 1e-6);
  Tensor mdx = max_pool2d_backward(cpu_ctx, c.p, x, dy, mf.workspace);
  Tensor gmdx = max_pool2d_backward(gpu_ctx, c.p, g_x, g_dy, gmf.workspace);
  EXPECT_EQ(gmdx.format(), format);
  EXPECT_LT(rel_error(gmdx, mdx), 1e-5);  // overlapping windows add in another order

  Tensor ay = avg_pool2d_forward(cpu_ctx, c.p, x);
  Tensor gay = avg_pool2d_forward(gpu_ctx, c.p, g_x);
  EXPECT_EQ(gay.format(), format);
  EXPECT_LT(rel_error(gay, ay), kTolerance);
  Tensor adx = avg_pool2d_backward(cpu_ctx, c.p, dy, c.x);
  Tensor gadx = avg_pool2d_backward(gpu_ctx, c.p, g_dy, c.x);
  EXPECT_EQ(gadx.format(), format);
  EXPECT_LT(rel_error(gadx, adx), kTolerance);
}

std::vector<PoolCase> pool_cases() {
  return {{{2, 3, 8, 8}, pool(2, 2, 2, 2, 0, 0, true)},  {{1, 5, 7, 7}, pool(3, 3, 2, 2, 1, 1, true)},
          {{1, 5, 7, 7}, pool(3, 3, 2, 2, 1, 1, false)}, {{3, 3, 6, 5}, pool(3, 2, 1, 2, 1, 0, true)},
          {{3, 3, 6, 5}, pool(3, 2, 1, 2, 1, 0, false)}, {{2, 16, 4, 4}, pool(3, 3, 1, 1, 1, 1, false)},
          {{1, 3, 5, 5}, pool(5, 5, 1, 1, 2, 2, false)}, {{2, 5, 7, 7}, pool(7, 7, 1, 1, 0, 0, true)},
          {{1, 3, 1, 1}, pool(1, 1, 1, 1, 0, 0, true)},  {{2, 8, 9, 7}, pool(3, 3, 3, 2, 1, 1, false)}};
}

INSTANTIATE_TEST_SUITE_P(Shapes, PoolGpuTest,
                         ::testing::Combine(::testing::ValuesIn(pool_cases()),
                                            ::testing::Values(MemoryFormat::kContiguous,
                                                              MemoryFormat::kChannelsLast)));

class GlobalPoolGpuTest : public ::testing::TestWithParam<MemoryFormat> {};

TEST_P(GlobalPoolGpuTest, MatchesTheCpu) {
  TANDEM_REQUIRE_GPU();
  MemoryFormat format = GetParam();
  ExecutionContext cpu_ctx(Device::cpu(), 2, 1);
  ExecutionContext gpu_ctx(Device::cuda(0));
  Shape xs{3, 5, 7, 6};
  Tensor x = random_tensor(xs, 41, -1.0f, 1.0f, format), dy = random_tensor({3, 5, 1, 1}, 42, -1.0f, 1.0f, format);
  EXPECT_LT(rel_error(global_avg_pool_forward(gpu_ctx, gpu(x)), global_avg_pool_forward(cpu_ctx, x)), kTolerance);
  Tensor gdx = global_avg_pool_backward(gpu_ctx, gpu(dy), xs);
  EXPECT_EQ(gdx.format(), format);
  EXPECT_LT(rel_error(gdx, global_avg_pool_backward(cpu_ctx, dy, xs)), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Formats, GlobalPoolGpuTest,
                         ::testing::Values(MemoryFormat::kContiguous, MemoryFormat::kChannelsLast));

// Overlapping windows and many ties (values from a handful of levels): the deterministic max
// pool gives the same gradient bit for bit, run after run.
TEST(MaxPoolGpuDeterminism, BackwardIsBitwiseRepeatable) {
  TANDEM_REQUIRE_GPU();
  for (MemoryFormat format : {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}) {
    SCOPED_TRACE(format_name(format));
    ExecutionContext gpu_ctx(Device::cuda(0));
    gpu_ctx.options().deterministic = true;
    Shape xs{8, 24, 33, 31};
    Pool2dParams p = pool(3, 3, 1, 1, 1, 1, true);
    Tensor rounded = random_tensor(xs, 51, 0.0f, 4.0f);
    std::vector<float> levels = rounded.to_vector();
    for (float& v : levels) v = std::floor(v);
    Tensor x = gpu(Tensor::from_vector(levels, xs).to_format(format));
    Tensor dy = gpu(random_tensor(pool2d_output_shape(p, xs), 52, -1.0f, 1.0f, format));
    MaxPoolForward f = max_pool2d_forward(gpu_ctx, p, x);
    Tensor first = max_pool2d_backward(gpu_ctx, p, x, dy, f.workspace);
    for (int run = 0; run < 3; ++run) {
      MaxPoolForward again = max_pool2d_forward(gpu_ctx, p, x);
      EXPECT_TRUE(bitwise_equal(again.y, f.y)) << "run " << run;
      EXPECT_TRUE(bitwise_equal(max_pool2d_backward(gpu_ctx, p, x, dy, again.workspace), first)) << "run " << run;
    }
  }
}

}  // namespace
}  // namespace tandem::backend
