// bf16 activations on the GPU (precision: bf16): the conversions give
// tandem::float_to_bf16's bits; a convolution given bf16 operands (ops.h's
// bf16_operand) gives the bits of the same convolution given f32 ones, which it
// rounds itself; batch norm with bf16_activations writes a bf16 y and dx within
// half a bf16 step of the CPU's f32 results, with f32 statistics, running
// averages and parameter gradients at f32's tolerance, and repeats bit for bit;
// relu_backward masks by a bf16 y. A convolution writes a bf16 y when asked
// (bf16_output), which batch norm reads as its widened values. A linear layer
// writes a bf16 y when asked, a unary op reads a bf16 x and writes a bf16 y,
// and layer norm writes a bf16 y.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/backend/ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace tandem::backend {
namespace {

constexpr double kF32Tolerance = 1e-4;
// A bf16 value is within 2^-9 of its f32 value (relative), plus the two
// backends' f32 differences.
constexpr double kBf16Tolerance = 4e-3;

using tandem::testing::bitwise_equal;
using tandem::testing::gpu;
using tandem::testing::random_tensor;
using tandem::testing::rel_error;

std::vector<float> values(const Tensor& t) { return tandem::testing::host_values(t); }

std::vector<uint16_t> bf16_bits(const Tensor& t) {
  Tensor host = t.to(Device::cpu()).to_format(MemoryFormat::kContiguous);
  const auto* p = static_cast<const uint16_t*>(host.raw_data());
  return std::vector<uint16_t>(p, p + host.numel());
}

struct Contexts {
  ExecutionContext cpu{Device::cpu(), 2, 1};
  ExecutionContext gpu{Device::cuda(0)};
  Contexts() { gpu.options().precision = Precision::kBf16; }
};

TEST(CudaBf16Activations, ConversionsGiveTheHostsBits) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  for (MemoryFormat format : {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}) {
    const Tensor x = random_tensor({3, 5, 7, 6}, 1, -40.0f, 40.0f, format);
    const Tensor rounded = bf16_operand(ctx.gpu, gpu(x));
    ASSERT_EQ(rounded.dtype(), DType::kBF16);
    EXPECT_EQ(rounded.format(), format);
    const std::vector<float> want = values(x);
    const std::vector<uint16_t> got = bf16_bits(rounded);
    int64_t wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) wrong += got[i] != float_to_bf16(want[i]).bits;
    EXPECT_EQ(wrong, 0) << memory_format_name(format);
    // A 1x1 max pool is the identity: it widens its bf16 x (from_bf16) and
    // returns it.
    const Pool2dParams identity{.kernel = {1, 1}, .stride = {1, 1}};
    const Tensor widened = max_pool2d_forward(ctx.gpu, identity, rounded).y;
    EXPECT_EQ(widened.dtype(), DType::kF32);
    EXPECT_TRUE(bitwise_equal(widened, rounded));
  }
}

// The convolution rounds an f32 operand into its own bf16 copy, so a bf16
// operand of the same values must give the same bits (the same plan and
// algorithm serve both calls).
// With cudnn_benchmark too: its search runs the candidates on the in-place bf16 operands.
TEST(CudaBf16Activations, ConvolutionsTakeBf16OperandsAsTheirOwnRounding) {
  TANDEM_REQUIRE_GPU();
  for (const bool benchmark : {false, true}) {
    for (MemoryFormat format : {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}) {
      SCOPED_TRACE(std::string(memory_format_name(format)) + (benchmark ? " cudnn_benchmark" : ""));
      Contexts ctx;
      ctx.gpu.options().deterministic = true;
      ctx.gpu.options().cudnn_benchmark = benchmark;
      const Conv2dParams p{.stride = {2, 1}, .padding = {1, 1}};
      const Tensor x = gpu(random_tensor({2, 8, 9, 7}, 2, -1.0f, 1.0f, format));
      const Tensor w = gpu(random_tensor({16, 8, 3, 3}, 3));
      const Tensor b = gpu(random_tensor({16}, 4));
      const Tensor x16 = bf16_operand(ctx.gpu, x);
      const Tensor y = conv2d_forward(ctx.gpu, p, x, w, b);
      EXPECT_TRUE(bitwise_equal(conv2d_forward(ctx.gpu, p, x16, w, b), y));
      // bf16_output: cuDNN's bf16 y written in place, the bits of the widened f32 y rounded again.
      const Tensor y16 = conv2d_forward(ctx.gpu, p, x16, w, {}, true);
      ASSERT_EQ(y16.dtype(), DType::kBF16);
      EXPECT_EQ(y16.format(), format);
      EXPECT_EQ(bf16_bits(y16), bf16_bits(bf16_operand(ctx.gpu, conv2d_forward(ctx.gpu, p, x16, w))));
      EXPECT_EQ(conv2d_forward(ctx.gpu, p, x16, w, b, true).dtype(), DType::kF32);  // a bias keeps f32
      const Tensor dy16 = bf16_operand(ctx.gpu, gpu(random_tensor(y.shape(), 5, -1.0f, 1.0f, format)));
      const Tensor dy = max_pool2d_forward(ctx.gpu, {.kernel = {1, 1}, .stride = {1, 1}}, dy16).y;  // widened
      EXPECT_TRUE(bitwise_equal(conv2d_backward_data(ctx.gpu, p, dy16, w, x.shape()),
                                conv2d_backward_data(ctx.gpu, p, dy, w, x.shape())));
      const ConvWeightGrads from16 = conv2d_backward_weights(ctx.gpu, p, x16, dy16, w.shape(), true);
      const ConvWeightGrads from32 = conv2d_backward_weights(ctx.gpu, p, x, dy, w.shape(), true);
      EXPECT_TRUE(bitwise_equal(from16.dw, from32.dw));
      EXPECT_TRUE(bitwise_equal(from16.db, from32.db));  // the bias sums the widened dy
      const Tensor start = random_tensor(x.shape(), 6, -1.0f, 1.0f, format);
      Tensor sum = gpu(start), sum32 = gpu(start);
      conv2d_backward_data_add(ctx.gpu, p, dy16, w, sum);
      conv2d_backward_data_add(ctx.gpu, p, dy, w, sum32);
      EXPECT_TRUE(bitwise_equal(sum, sum32));
    }
  }
}

// The same for a linear layer (cuBLASLt reads a bf16 operand in place); its bias gradient sums the
// bf16 dy, which is the sum of the widened dy.
TEST(CudaBf16Activations, LinearLayersTakeBf16OperandsAsTheirOwnRounding) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  const Tensor x = gpu(random_tensor({37, 24}, 7)), w = gpu(random_tensor({40, 24}, 8));
  const Tensor b = gpu(random_tensor({40}, 9));
  const Tensor x16 = bf16_operand(ctx.gpu, x);
  EXPECT_TRUE(bitwise_equal(linear_forward(ctx.gpu, x16, w, b), linear_forward(ctx.gpu, x, w, b)));
  const Tensor dy16 = bf16_operand(ctx.gpu, gpu(random_tensor({37, 40}, 10)));
  const Tensor dy = gpu(Tensor::from_vector(values(dy16), dy16.shape()));  // its f32 values
  EXPECT_TRUE(bitwise_equal(linear_backward_data(ctx.gpu, dy16, w), linear_backward_data(ctx.gpu, dy, w)));
  const LinearWeightGrads from16 = linear_backward_weights(ctx.gpu, x16, dy16, true);
  const LinearWeightGrads from32 = linear_backward_weights(ctx.gpu, x, dy, true);
  EXPECT_TRUE(bitwise_equal(from16.dw, from32.dw));
  EXPECT_TRUE(bitwise_equal(from16.db, from32.db));
}

// A linear layer asked for a bf16 output: cuBLASLt writes D in bf16 from its f32 accumulator with the
// bias's bf16 shadow added in the epilogue. Its f32 output with that bias, rounded, may differ where
// the two algorithms sum in another order: by one bf16 step of the largest value at most (a value
// that cancels near 0 can be several of its own steps apart); so may the CPU's result of the rounded
// operands.
TEST(CudaBf16Activations, LinearLayersWriteABf16OutputWithTheRoundedBias) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  const Tensor x = gpu(random_tensor({37, 64}, 11)), w = gpu(random_tensor({96, 64}, 12));
  const Tensor b = gpu(random_tensor({96}, 13, -3.0f, 3.0f));
  const Tensor b_rounded = gpu(Tensor::from_vector(values(bf16_operand(ctx.gpu, b)), b.shape()));
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "with a bias" : "without a bias");
    const Tensor y16 = linear_forward(ctx.gpu, x, w, with_bias ? b : Tensor(), true);
    ASSERT_EQ(y16.dtype(), DType::kBF16);
    const Tensor y32 = linear_forward(ctx.gpu, x, w, with_bias ? b_rounded : Tensor());
    EXPECT_LE(rel_error(y16, bf16_operand(ctx.gpu, y32)), 1.0 / 128);  // 2^-7: a step of the largest
    const Tensor cpu_x = Tensor::from_vector(values(bf16_operand(ctx.gpu, x)), x.shape());
    const Tensor cpu_w = Tensor::from_vector(values(bf16_operand(ctx.gpu, w)), w.shape());
    const Tensor cpu_b = with_bias ? b_rounded.to(Device::cpu()) : Tensor();
    EXPECT_LE(rel_error(y16, linear_forward(ctx.cpu, cpu_x, cpu_w, cpu_b)), 1.0 / 128);
  }
  EXPECT_EQ(b.dtype(), DType::kF32);  // the master bias stays f32
}

// A unary op (the MLP's GELU) reads a bf16 x as its widened values and writes a bf16 y as the f32
// result of the same kernel rounded, bit for bit; its backward reads the bf16 x the same way.
TEST(CudaBf16Activations, UnaryOpsReadABf16XAndWriteABf16Y) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  const Tensor x16 = bf16_operand(ctx.gpu, gpu(random_tensor({9, 4, 70}, 14, -4.0f, 4.0f)));
  const Tensor x = gpu(Tensor::from_vector(values(x16), x16.shape()));  // its f32 values
  const Tensor dy = gpu(random_tensor({9, 4, 70}, 15));
  for (UnaryOp op : {UnaryOp::kGeluErf, UnaryOp::kGeluTanh, UnaryOp::kTanh}) {
    SCOPED_TRACE(::testing::Message() << "op " << static_cast<int>(op));
    const Tensor want = unary(ctx.gpu, op, x);
    EXPECT_TRUE(bitwise_equal(unary(ctx.gpu, op, x16), want));
    const Tensor y16 = unary(ctx.gpu, op, x16, true);
    ASSERT_EQ(y16.dtype(), DType::kBF16);
    EXPECT_EQ(bf16_bits(y16), bf16_bits(bf16_operand(ctx.gpu, want)));
    EXPECT_TRUE(bitwise_equal(unary_backward(ctx.gpu, op, x16, want, dy), unary_backward(ctx.gpu, op, x, want, dy)));
    EXPECT_LT(rel_error(y16, unary(ctx.cpu, op, x.to(Device::cpu()))), kBf16Tolerance);
  }
  EXPECT_TRUE(bitwise_equal(unary_backward(ctx.gpu, UnaryOp::kGeluErf, x16, {}, dy),
                            unary_backward(ctx.gpu, UnaryOp::kGeluErf, x, {}, dy)));
}

// Layer norm asked for a bf16 y rounds its f32 y as it stores it: the bits of the f32 output of the
// same kernel rounded, with the same f32 statistics.
TEST(CudaBf16Activations, LayerNormWritesABf16Y) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  const Tensor x = gpu(random_tensor({6, 5, 96}, 16, -3.0f, 5.0f));
  const Tensor w = gpu(random_tensor({96}, 17, 0.5f, 1.5f)), b = gpu(random_tensor({96}, 18));
  const LayerNormForward want = layer_norm_forward(ctx.gpu, x, 1, w, b, 1e-5f);
  const LayerNormForward got = layer_norm_forward(ctx.gpu, x, 1, w, b, 1e-5f, true);
  ASSERT_EQ(got.y.dtype(), DType::kBF16);
  EXPECT_EQ(bf16_bits(got.y), bf16_bits(bf16_operand(ctx.gpu, want.y)));
  EXPECT_TRUE(bitwise_equal(got.mean, want.mean) && bitwise_equal(got.var, want.var));
}

struct BnCase {
  Shape x;
  MemoryFormat format;
  bool relu, shortcut;
  bool keeps_bf16 = true;  // false: an f32 y beside a bf16 shortcut (a block end that keeps f32)
};

std::string name_of(const BnCase& c) {
  return c.x.str() + " " + std::string(memory_format_name(c.format)) + (c.relu ? " relu" : "") +
         (c.shortcut ? " +shortcut" : "") + (c.keeps_bf16 ? "" : " f32 y");
}

class CudaBf16BatchNorm : public ::testing::TestWithParam<BnCase> {};

TEST_P(CudaBf16BatchNorm, Bf16OutputsWithinHalfAStepOfTheCpusF32) {
  TANDEM_REQUIRE_GPU();
  const BnCase& c = GetParam();
  SCOPED_TRACE(name_of(c));
  Contexts ctx;
  const int64_t ch = c.x[1];
  BatchNormParams p{
      .eps = 1e-3f, .momentum = 0.2f, .fuse_relu = c.relu && !c.shortcut, .bf16_activations = c.keeps_bf16};
  const DType activations = c.keeps_bf16 ? DType::kBF16 : DType::kF32;
  const Tensor gamma = random_tensor({ch}, 1, 0.5f, 1.5f), beta = random_tensor({ch}, 2);
  Tensor rm = random_tensor({ch}, 3), rv = random_tensor({ch}, 4, 0.5f, 2.0f);
  Tensor g_rm = gpu(rm), g_rv = gpu(rv);
  const Tensor x = random_tensor(c.x, 10, -2.0f, 3.0f, c.format);
  const Tensor g_shortcut = bf16_operand(ctx.gpu, gpu(random_tensor(c.x, 11, -1.0f, 1.0f, c.format)));
  const Tensor shortcut = Tensor::from_vector(values(g_shortcut), c.x).to_format(c.format);  // its f32 values

  BatchNormForward f, gf;
  if (c.shortcut) {
    f = batchnorm_add_relu_forward_training(ctx.cpu, p, x, gamma, beta, shortcut, rm, rv);
    gf = batchnorm_add_relu_forward_training(ctx.gpu, p, gpu(x), gpu(gamma), gpu(beta), g_shortcut, g_rm, g_rv);
  } else {
    f = batchnorm_forward_training(ctx.cpu, p, x, gamma, beta, rm, rv);
    gf = batchnorm_forward_training(ctx.gpu, p, gpu(x), gpu(gamma), gpu(beta), g_rm, g_rv);
  }
  ASSERT_EQ(gf.y.dtype(), activations);
  EXPECT_EQ(gf.y.format(), c.format);
  EXPECT_LT(rel_error(gf.y, f.y), kBf16Tolerance);
  EXPECT_LT(rel_error(gf.saved.mean, f.saved.mean), kF32Tolerance);
  EXPECT_LT(rel_error(gf.saved.invstd, f.saved.invstd), kF32Tolerance);
  EXPECT_LT(rel_error(g_rm, rm), kF32Tolerance);
  EXPECT_LT(rel_error(g_rv, rv),
            kF32Tolerance);  // unbiased variance, momentum as PyTorch

  // The backward: after a block end, relu_backward (with the bf16 y) then batch
  // norm without ReLU.
  const Tensor dy_out = random_tensor(c.x, 20, -1.0f, 1.0f, c.format);
  Tensor dy = dy_out, g_dy = gpu(dy_out);
  if (c.shortcut) {
    dy = relu_backward(ctx.cpu, f.y, dy_out);
    g_dy = relu_backward(ctx.gpu, gf.y, gpu(dy_out));
    EXPECT_TRUE(bitwise_equal(
        g_dy, relu_backward(ctx.cpu, Tensor::from_vector(values(gf.y), c.x).to_format(c.format), dy_out)));
  }
  const BatchNormGrads g = batchnorm_backward(ctx.cpu, p, x, f.y, dy, gamma, f.saved);
  const BatchNormGrads gg = batchnorm_backward(ctx.gpu, p, gpu(x), gf.y, g_dy, gpu(gamma), gf.saved);
  ASSERT_EQ(gg.dx.dtype(), activations);
  EXPECT_EQ(gg.dx.format(), c.format);
  EXPECT_LT(rel_error(gg.dx, g.dx), kBf16Tolerance);
  EXPECT_LT(rel_error(gg.dgamma, g.dgamma),
            1e-3);  // f32 sums over a mask read from bf16 y
  EXPECT_LT(rel_error(gg.dbeta, g.dbeta), 1e-3);

  // Fixed-order sums: the same inputs give the same bits.
  const BatchNormGrads again = batchnorm_backward(ctx.gpu, p, gpu(x), gf.y, g_dy, gpu(gamma), gf.saved);
  EXPECT_TRUE(bitwise_equal(again.dx, gg.dx));
  EXPECT_TRUE(bitwise_equal(again.dgamma, gg.dgamma));

  // Eval mode stays f32.
  const Tensor yi = batchnorm_forward_inference(ctx.gpu, p, gpu(x), gpu(gamma), gpu(beta), g_rm, g_rv);
  EXPECT_EQ(yi.dtype(), DType::kF32);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBf16BatchNorm,
                         ::testing::Values(BnCase{{4, 16, 8, 8}, MemoryFormat::kChannelsLast, true, false},
                                           BnCase{{4, 16, 8, 8}, MemoryFormat::kChannelsLast, false, false},
                                           BnCase{{4, 16, 8, 8}, MemoryFormat::kChannelsLast, true, true},
                                           BnCase{{3, 5, 7, 6}, MemoryFormat::kContiguous, true, false},
                                           BnCase{{3, 5, 7, 6}, MemoryFormat::kContiguous, false, true},
                                           BnCase{{1, 40, 1, 2}, MemoryFormat::kChannelsLast, true, true},
                                           BnCase{{4, 16, 8, 8}, MemoryFormat::kChannelsLast, true, true, false},
                                           BnCase{{3, 5, 7, 6}, MemoryFormat::kContiguous, true, true, false}),
                         [](const auto& test) { return "case" + std::to_string(test.index); });

// A convolution's bf16 output as the batch norm's x: on the GPU every result is bitwise that of its
// widened values (the kernels read either as f32), and an f32 y beside a bf16 x (a layer that keeps
// f32) is cuDNN's f32 result within f32's tolerance.
TEST(CudaBf16Activations, BatchNormReadsABf16XAsItsWidenedValues) {
  TANDEM_REQUIRE_GPU();
  for (MemoryFormat format : {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}) {
    SCOPED_TRACE(memory_format_name(format));
    Contexts ctx;
    const Shape shape{4, 24, 7, 5};
    const int64_t ch = shape[1];
    const Tensor x16 = bf16_operand(ctx.gpu, gpu(random_tensor(shape, 30, -2.0f, 3.0f, format)));
    const Tensor x32 = max_pool2d_forward(ctx.gpu, {.kernel = {1, 1}, .stride = {1, 1}}, x16).y;  // widened
    const Tensor gamma = gpu(random_tensor({ch}, 31, 0.5f, 1.5f)), beta = gpu(random_tensor({ch}, 32));
    const Tensor dy = gpu(random_tensor(shape, 33, -1.0f, 1.0f, format));
    const Tensor shortcut = bf16_operand(ctx.gpu, gpu(random_tensor(shape, 34, -1.0f, 1.0f, format)));
    for (bool keeps_bf16 : {true, false}) {
      BatchNormParams p{.eps = 1e-5f, .momentum = 0.1f, .fuse_relu = true, .bf16_activations = keeps_bf16};
      Tensor rm = gpu(Tensor::zeros({ch})), rv = gpu(Tensor::zeros({ch}));
      Tensor rm16 = gpu(Tensor::zeros({ch})), rv16 = gpu(Tensor::zeros({ch}));
      const BatchNormForward want = batchnorm_forward_training(ctx.gpu, p, x32, gamma, beta, rm, rv);
      const BatchNormForward got = batchnorm_forward_training(ctx.gpu, p, x16, gamma, beta, rm16, rv16);
      ASSERT_EQ(got.y.dtype(), want.y.dtype());
      const BatchNormGrads gw = batchnorm_backward(ctx.gpu, p, x32, want.y, dy, gamma, want.saved);
      const BatchNormGrads gg = batchnorm_backward(ctx.gpu, p, x16, got.y, dy, gamma, got.saved);
      if (keeps_bf16) {  // the same kernels on the same values
        EXPECT_EQ(bf16_bits(got.y), bf16_bits(want.y));
        EXPECT_TRUE(bitwise_equal(rv16, rv));
        EXPECT_EQ(bf16_bits(gg.dx), bf16_bits(gw.dx));
        EXPECT_TRUE(bitwise_equal(gg.dgamma, gw.dgamma));
        EXPECT_TRUE(bitwise_equal(gg.dbeta, gw.dbeta));
        BatchNormParams add = p;
        add.fuse_relu = false;
        EXPECT_EQ(bf16_bits(batchnorm_add_relu_forward_training(ctx.gpu, add, x16, gamma, beta, shortcut, rm16, rv16).y),
                  bf16_bits(batchnorm_add_relu_forward_training(ctx.gpu, add, x32, gamma, beta, shortcut, rm, rv).y));
      } else {  // our kernels for the bf16 x, cuDNN's for the f32 one
        EXPECT_LT(rel_error(got.y, want.y), kF32Tolerance);
        EXPECT_LT(rel_error(rv16, rv), kF32Tolerance);
        EXPECT_LT(rel_error(gg.dx, gw.dx), kF32Tolerance);
        EXPECT_LT(rel_error(gg.dgamma, gw.dgamma), kF32Tolerance);
      }
    }
  }
}

// An f32 context ignores the flag: y and dx stay f32 (cuDNN's path).
TEST(CudaBf16Activations, Fp32ContextKeepsF32) {
  TANDEM_REQUIRE_GPU();
  ExecutionContext gpu_ctx(Device::cuda(0));
  BatchNormParams p{.bf16_activations = true};
  Tensor rm = gpu(Tensor::zeros({4})), rv = gpu(random_tensor({4}, 4, 0.5f, 2.0f));
  const Tensor x = gpu(random_tensor({2, 4, 3, 3}, 1));
  const BatchNormForward f =
      batchnorm_forward_training(gpu_ctx, p, x, gpu(random_tensor({4}, 2)), gpu(random_tensor({4}, 3)), rm, rv);
  EXPECT_EQ(f.y.dtype(), DType::kF32);
}

}  // namespace
}  // namespace tandem::backend
