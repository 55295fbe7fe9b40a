// Activations kept in bf16 between ops (BatchNormParams::bf16_activations, precision: bf16 on the
// CPU): a batch norm writes its y and its dx in bf16, the very bits of its f32 result rounded to
// nearest even; it takes a bf16 shortcut as the shortcut's widened values; relu_backward masks by a
// bf16 y, and the pooling ops read a bf16 x, as they would its widened copy; a batch norm reads a
// bf16 x (a convolution's bf16 output) as its widened copy. Both the AVX-512
// kernels (channels_last, multiples of 16 channels) and oneDNN's path (the rest).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "backend_test_util.h"
#include "tests/backend/bf16_values.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::backend::testing {
namespace {

ExecutionContext& bf16_context() { return tandem::testing::bf16_cpu_context(); }

struct Case {
  Shape x;
  MemoryFormat format;
  const char* path;
};

class Bf16Activations : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16Activations, BatchNormWritesTheRoundedF32ResultAndReadsABf16Shortcut) {
  TANDEM_REQUIRE_BF16_CPU();
  const Case& c = GetParam();
  ExecutionContext& ctx = bf16_context();
  const int64_t channels = c.x[1];
  Tensor x = to_tensor(random_vec(static_cast<size_t>(c.x.numel()), 1, -2, 3), c.x, c.format);
  Tensor gamma = to_tensor(random_vec(static_cast<size_t>(channels), 2, 0.5, 1.5), {channels});
  Tensor beta = to_tensor(random_vec(static_cast<size_t>(channels), 3), {channels});
  Tensor dy = to_tensor(random_vec(static_cast<size_t>(c.x.numel()), 4), c.x, c.format);
  Tensor shortcut16 = bf16_operand(ctx, to_tensor(random_vec(static_cast<size_t>(c.x.numel()), 5), c.x, c.format));
  for (bool relu : {false, true}) {
    BatchNormParams f32_params;
    f32_params.fuse_relu = relu;
    BatchNormParams bf16_params = f32_params;
    bf16_params.bf16_activations = true;
    Tensor rm = Tensor::zeros({channels}), rv = Tensor::zeros({channels});
    Tensor rm16 = Tensor::zeros({channels}), rv16 = Tensor::zeros({channels});
    BatchNormForward want = batchnorm_forward_training(ctx, f32_params, x, gamma, beta, rm, rv);
    BatchNormForward got = batchnorm_forward_training(ctx, bf16_params, x, gamma, beta, rm16, rv16);
    const std::string what = std::string(c.path) + (relu ? ", with its ReLU" : "");
    expect_rounding_of(got.y, want.y, "y, " + what);
    EXPECT_EQ(rm16.to_vector(), rm.to_vector()) << "running statistics stay f32, " << what;
    EXPECT_EQ(got.saved.invstd.to_vector(), want.saved.invstd.to_vector()) << what;

    BatchNormGrads gw = batchnorm_backward(ctx, f32_params, x, want.y, dy, gamma, want.saved);
    BatchNormGrads gg = batchnorm_backward(ctx, bf16_params, x, got.y, dy, gamma, got.saved);
    expect_rounding_of(gg.dx, gw.dx, "dx, " + what);
    EXPECT_EQ(gg.dgamma.to_vector(), gw.dgamma.to_vector()) << what;
    EXPECT_EQ(gg.dbeta.to_vector(), gw.dbeta.to_vector()) << what;
  }
  BatchNormParams add_params;
  Tensor rm = Tensor::zeros({channels}), rv = Tensor::zeros({channels});
  BatchNormForward want =
      batchnorm_add_relu_forward_training(ctx, add_params, x, gamma, beta, widened(shortcut16), rm, rv);
  add_params.bf16_activations = true;
  BatchNormForward got = batchnorm_add_relu_forward_training(ctx, add_params, x, gamma, beta, shortcut16, rm, rv);
  expect_rounding_of(got.y, want.y, std::string("the residual sum's y, ") + c.path);
  EXPECT_EQ(relu_backward(ctx, got.y, dy).to_vector(), relu_backward(ctx, widened(got.y), dy).to_vector());
}

// A convolution's bf16 output (conv2d_forward's bf16_output) as the batch norm's x: every result is
// bitwise that of its widened values, forward (plain and with the residual sum) and backward.
TEST_P(Bf16Activations, BatchNormReadsABf16XAsItsWidenedValues) {
  TANDEM_REQUIRE_BF16_CPU();
  const Case& c = GetParam();
  ExecutionContext& ctx = bf16_context();
  const int64_t channels = c.x[1];
  Tensor x16 = bf16_operand(ctx, to_tensor(random_vec(static_cast<size_t>(c.x.numel()), 11, -2, 3), c.x, c.format));
  Tensor x32 = widened(x16);
  Tensor gamma = to_tensor(random_vec(static_cast<size_t>(channels), 12, 0.5, 1.5), {channels});
  Tensor beta = to_tensor(random_vec(static_cast<size_t>(channels), 13), {channels});
  Tensor dy = to_tensor(random_vec(static_cast<size_t>(c.x.numel()), 14), c.x, c.format);
  Tensor shortcut16 = bf16_operand(ctx, to_tensor(random_vec(static_cast<size_t>(c.x.numel()), 15), c.x, c.format));
  BatchNormParams p;
  p.fuse_relu = true;
  p.bf16_activations = true;
  Tensor rm = Tensor::zeros({channels}), rv = Tensor::zeros({channels});
  Tensor rm16 = Tensor::zeros({channels}), rv16 = Tensor::zeros({channels});
  BatchNormForward want = batchnorm_forward_training(ctx, p, x32, gamma, beta, rm, rv);
  BatchNormForward got = batchnorm_forward_training(ctx, p, x16, gamma, beta, rm16, rv16);
  expect_rounding_of(got.y, widened(want.y), std::string("y, ") + c.path);
  EXPECT_EQ(rm16.to_vector(), rm.to_vector()) << c.path;
  EXPECT_EQ(rv16.to_vector(), rv.to_vector()) << c.path;
  BatchNormGrads gw = batchnorm_backward(ctx, p, x32, want.y, dy, gamma, want.saved);
  BatchNormGrads gg = batchnorm_backward(ctx, p, x16, got.y, dy, gamma, got.saved);
  expect_rounding_of(gg.dx, widened(gw.dx), std::string("dx, ") + c.path);
  EXPECT_EQ(gg.dgamma.to_vector(), gw.dgamma.to_vector()) << c.path;
  EXPECT_EQ(gg.dbeta.to_vector(), gw.dbeta.to_vector()) << c.path;
  BatchNormParams add = p;
  add.fuse_relu = false;
  BatchNormForward add_want = batchnorm_add_relu_forward_training(ctx, add, x32, gamma, beta, shortcut16, rm, rv);
  BatchNormForward add_got = batchnorm_add_relu_forward_training(ctx, add, x16, gamma, beta, shortcut16, rm16, rv16);
  expect_rounding_of(add_got.y, widened(add_want.y), std::string("the residual sum's y, ") + c.path);
  // Eval mode reads the bf16 x widened too.
  EXPECT_EQ(batchnorm_forward_inference(ctx, p, x16, gamma, beta, rm, rv).to_vector(),
            batchnorm_forward_inference(ctx, p, x32, gamma, beta, rm, rv).to_vector());
}

INSTANTIATE_TEST_SUITE_P(Paths, Bf16Activations,
                         ::testing::Values(Case{{4, 32, 5, 7}, MemoryFormat::kChannelsLast, "AVX-512 kernels"},
                                           Case{{2, 64, 3, 3}, MemoryFormat::kChannelsLast, "AVX-512, 64 channels"},
                                           Case{{3, 5, 6, 6}, MemoryFormat::kChannelsLast, "oneDNN, 5 channels"},
                                           Case{{2, 16, 6, 5}, MemoryFormat::kContiguous, "oneDNN, nchw"}));

TEST(Bf16ActivationsPooling, PoolingABf16XIsPoolingItsWidenedValues) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext& ctx = bf16_context();
  const Shape xs{2, 16, 8, 8};
  Tensor x16 = bf16_operand(ctx, to_tensor(random_vec(static_cast<size_t>(xs.numel()), 7), xs,
                                           MemoryFormat::kChannelsLast));
  const Tensor x = widened(x16);
  Pool2dParams p;
  p.kernel = {3, 3};
  p.padding = {1, 1};
  MaxPoolForward m16 = max_pool2d_forward(ctx, p, x16), m = max_pool2d_forward(ctx, p, x);
  EXPECT_EQ(m16.y.to_vector(), m.y.to_vector());
  Tensor dy = to_tensor(random_vec(static_cast<size_t>(m.y.numel()), 8), m.y.shape(), MemoryFormat::kChannelsLast);
  EXPECT_EQ(max_pool2d_backward(ctx, p, x16, dy, m16.workspace).to_vector(),
            max_pool2d_backward(ctx, p, x, dy, m.workspace).to_vector());
  EXPECT_EQ(avg_pool2d_forward(ctx, p, x16).to_vector(), avg_pool2d_forward(ctx, p, x).to_vector());
  EXPECT_EQ(global_avg_pool_forward(ctx, x16).to_vector(), global_avg_pool_forward(ctx, x).to_vector());
}

// In an fp32 context the flag changes nothing, and a bf16 activation is refused by name.
TEST(Bf16ActivationsPooling, AnFp32ContextKeepsF32AndRefusesBf16Activations) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext ctx(Device::cpu(), 2, 1);
  const Shape xs{2, 16, 4, 4};
  Tensor x = to_tensor(random_vec(static_cast<size_t>(xs.numel()), 9), xs, MemoryFormat::kChannelsLast);
  BatchNormParams p;
  p.bf16_activations = true;
  Tensor rm = Tensor::zeros({16}), rv = Tensor::zeros({16}), gamma = Tensor::zeros({16}), beta = Tensor::zeros({16});
  EXPECT_EQ(batchnorm_forward_training(ctx, p, x, gamma, beta, rm, rv).y.dtype(), DType::kF32);
  Tensor x16 = bf16_operand(bf16_context(), x);
  expect_error([&] { global_avg_pool_forward(ctx, x16); }, ErrorCode::kInvalidArgument,
               {"global_avg_pool_forward", "x must be f32"});
}

}  // namespace
}  // namespace tandem::backend::testing
