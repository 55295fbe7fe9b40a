// Every op rejects wrong shapes, dtypes, devices and formats with an error that names the op,
// the argument and both shapes, before any kernel runs; a CUDA tensor handed to a CPU
// context is an error, never a crash.
#include <gtest/gtest.h>

#include "backend_test_util.h"

namespace tandem::backend::testing {
namespace {

struct ErrorCase {
  std::string name;
  std::function<void(Ctx&)> call;
  std::vector<std::string> parts;
};

Tensor f32(const Shape& s, MemoryFormat format = MemoryFormat::kContiguous) {
  return Tensor::zeros(s, DType::kF32, Device::cpu(), format);
}

Tensor i64(const Shape& s) { return Tensor::zeros(s, DType::kI64); }

// Memory on the host labelled as a CUDA tensor: enough to test the device check, which must
// fire before anything reads it.
Tensor cuda_tensor(const Shape& s) {
  static std::vector<float> host(4096);
  return Tensor::borrow(host.data(), s, DType::kF32, Device::cuda(0));
}

std::vector<ErrorCase> shape_cases() {
  Conv2dParams p;
  Pool2dParams pool;
  BatchNormParams bn;
  return {
      {"conv_w_channels", [=](Ctx& c) { conv2d_forward(c, p, f32({2, 3, 8, 8}), f32({8, 4, 3, 3})); },
       {"conv2d_forward", "w has shape [8, 4, 3, 3]", "x has 3 channels ([2, 3, 8, 8])", "(K, C/groups, R, S)"}},
      {"conv_bias", [=](Ctx& c) { conv2d_forward(c, p, f32({2, 3, 8, 8}), f32({8, 3, 3, 3}), f32({7})); },
       {"conv2d_forward", "b has shape [7]", "w has 8 filters ([8, 3, 3, 3])"}},
      {"conv_rank", [=](Ctx& c) { conv2d_forward(c, p, f32({3, 8, 8}), f32({8, 3, 3, 3})); },
       {"conv2d_forward", "x must be 4-D", "[3, 8, 8]"}},
      {"conv_too_small", [=](Ctx& c) { conv2d_forward(c, p, f32({1, 3, 2, 2}), f32({8, 3, 3, 3})); },
       {"conv2d_forward", "[1, 3, 2, 2]", "empty"}},
      {"conv_groups",
       [=](Ctx& c) {
         Conv2dParams g = p;
         g.groups = 2;
         conv2d_forward(c, g, f32({1, 3, 8, 8}), f32({4, 1, 3, 3}));
       },
       {"conv2d_forward", "groups = 2", "[1, 3, 8, 8]", "[4, 1, 3, 3]"}},
      {"conv_bwd_data", [=](Ctx& c) { conv2d_backward_data(c, p, f32({2, 8, 5, 5}), f32({8, 3, 3, 3}), {2, 3, 8, 8}); },
       {"conv2d_backward_data", "dy has shape [2, 8, 5, 5]", "[2, 3, 8, 8]", "[2, 8, 6, 6]"}},
      {"conv_bwd_weights_format",
       [=](Ctx& c) {
         conv2d_backward_weights(c, p, f32({2, 3, 8, 8}), f32({2, 8, 6, 6}, MemoryFormat::kChannelsLast),
                                 {8, 3, 3, 3}, false);
       },
       {"conv2d_backward_weights", "dy [2, 8, 6, 6] is channels_last", "x [2, 3, 8, 8] is contiguous"}},
      {"conv_bwd_weights_shape",
       [=](Ctx& c) { conv2d_backward_weights(c, p, f32({2, 3, 8, 8}), f32({2, 8, 5, 6}), {8, 3, 3, 3}, true); },
       {"conv2d_backward_weights", "dy has shape [2, 8, 5, 6]", "x [2, 3, 8, 8]", "[8, 3, 3, 3]"}},
      {"bn_gamma",
       [=](Ctx& c) {
         Tensor rm = f32({4}), rv = f32({4});
         batchnorm_forward_training(c, bn, f32({2, 4, 3, 3}), f32({5}), f32({4}), rm, rv);
       },
       {"batchnorm_forward_training", "gamma has shape [5]", "x has 4 channels ([2, 4, 3, 3])"}},
      {"bn_one_value",
       [=](Ctx& c) {
         Tensor rm = f32({4}), rv = f32({4});
         batchnorm_forward_training(c, bn, f32({1, 4, 1, 1}), f32({4}), f32({4}), rm, rv);
       },
       {"batchnorm_forward_training", "[1, 4, 1, 1]", "more than one"}},
      {"bn_inference_var",
       [=](Ctx& c) { batchnorm_forward_inference(c, bn, f32({2, 4, 3, 3}), f32({4}), f32({4}), f32({4}), f32({3})); },
       {"batchnorm_forward_inference", "running_var has shape [3]", "[2, 4, 3, 3]"}},
      {"bn_backward_dy",
       [=](Ctx& c) {
         BatchNormSaved s{f32({4}), f32({4}), {}};
         batchnorm_backward(c, bn, f32({2, 4, 3, 3}), f32({2, 4, 3, 3}), f32({2, 4, 3, 2}), f32({4}), s);
       },
       {"batchnorm_backward", "dy has shape [2, 4, 3, 2]", "x has shape [2, 4, 3, 3]"}},
      {"relu_backward", [=](Ctx& c) { relu_backward(c, f32({2, 3}), f32({3, 2})); },
       {"relu_backward", "dy has shape [3, 2]", "y has shape [2, 3]"}},
      {"max_pool_rank", [=](Ctx& c) { max_pool2d_forward(c, pool, f32({2, 3})); },
       {"max_pool2d_forward", "x must be 4-D", "[2, 3]"}},
      {"max_pool_padding",
       [=](Ctx& c) {
         Pool2dParams q = pool;
         q.padding = {2, 2};
         max_pool2d_forward(c, q, f32({1, 1, 8, 8}));
       },
       {"max_pool2d_forward", "padding (2, 2)", "kernel (2, 2)"}},
      {"max_pool_backward",
       [=](Ctx& c) {
         max_pool2d_backward(c, pool, f32({1, 2, 8, 8}), f32({1, 2, 3, 4}), Tensor::zeros({8}, DType::kU8));
       },
       {"max_pool2d_backward", "dy has shape [1, 2, 3, 4]", "x [1, 2, 8, 8]", "[1, 2, 4, 4]"}},
      {"avg_pool", [=](Ctx& c) { avg_pool2d_forward(c, pool, f32({1, 2, 1, 8})); },
       {"avg_pool2d_forward", "[1, 2, 1, 8]", "empty"}},
      {"avg_pool_backward", [=](Ctx& c) { avg_pool2d_backward(c, pool, f32({1, 2, 4, 4}), {1, 2, 9, 6}); },
       {"avg_pool2d_backward", "dy has shape [1, 2, 4, 4]", "x_shape [1, 2, 9, 6]", "[1, 2, 4, 3]"}},
      {"global_pool", [=](Ctx& c) { global_avg_pool_forward(c, f32({2, 3, 4})); },
       {"global_avg_pool_forward", "x must be 4-D", "[2, 3, 4]"}},
      {"global_pool_backward", [=](Ctx& c) { global_avg_pool_backward(c, f32({2, 3, 1, 1}), {2, 4, 5, 5}); },
       {"global_avg_pool_backward", "dy has shape [2, 3, 1, 1]", "x_shape [2, 4, 5, 5]"}},
      {"matmul", [=](Ctx& c) { matmul(c, f32({3, 4}), f32({5, 6})); },
       {"matmul", "a has shape [3, 4]", "b has shape [5, 6]"}},
      {"linear", [=](Ctx& c) { linear_forward(c, f32({2, 5}), f32({3, 4})); },
       {"linear_forward", "w has shape [3, 4]", "x has 5 features ([2, 5])"}},
      {"linear_bias", [=](Ctx& c) { linear_forward(c, f32({2, 4}), f32({3, 4}), f32({4})); },
       {"linear_forward", "b has shape [4]", "w has 3 outputs ([3, 4])"}},
      {"linear_backward_data", [=](Ctx& c) { linear_backward_data(c, f32({2, 5}), f32({3, 4})); },
       {"linear_backward_data", "w has shape [3, 4]", "dy has 5 outputs ([2, 5])"}},
      {"linear_backward_weights", [=](Ctx& c) { linear_backward_weights(c, f32({2, 4}), f32({3, 5}), true); },
       {"linear_backward_weights", "dy has shape [3, 5]", "x has shape [2, 4]"}},
      {"add", [=](Ctx& c) { add(c, f32({2, 3}), f32({3, 2})); }, {"add", "b has shape [3, 2]", "a has shape [2, 3]"}},
      {"add_format",
       [=](Ctx& c) { add(c, f32({1, 2, 3, 4}), f32({1, 2, 3, 4}, MemoryFormat::kChannelsLast)); },
       {"add", "b [1, 2, 3, 4] is channels_last", "a [1, 2, 3, 4] is contiguous"}},
      {"mul", [=](Ctx& c) { mul(c, f32({4}), f32({5})); }, {"mul", "b has shape [5]", "a has shape [4]"}},
      {"axpy",
       [=](Ctx& c) {
         Tensor y = f32({5});
         axpy(c, 1.0f, f32({4}), y);
       },
       {"axpy", "y has shape [5]", "x has shape [4]"}},
      {"sce_labels", [=](Ctx& c) { softmax_cross_entropy_forward(c, f32({4, 10}), i64({3})); },
       {"softmax_cross_entropy_forward", "labels has shape [3]", "logits has 4 rows ([4, 10])"}},
      {"sce_backward", [=](Ctx& c) { softmax_cross_entropy_backward(c, f32({4, 10}), i64({4}), 0.0f, f32({5})); },
       {"softmax_cross_entropy_backward", "dloss has shape [5]", "probs has 4 rows ([4, 10])"}},
      {"dropout_p", [=](Ctx& c) { dropout_forward(c, f32({4}), 1.5f); }, {"dropout_forward", "p = 1.5"}},
      {"dropout_mask",
       [=](Ctx& c) { dropout_backward(c, f32({4, 2}), Tensor::zeros({2, 4}, DType::kU8), 0.5f); },
       {"dropout_backward", "mask has shape [2, 4]", "dy has shape [4, 2]"}},
  };
}

class OpErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(OpErrorTest, NamesTheOpTheArgumentAndBothShapes) {
  ExecutionContext ctx(Device::cpu(), 1, 1);
  expect_error([&] { GetParam().call(ctx); }, ErrorCode::kInvalidArgument, GetParam().parts);
}

INSTANTIATE_TEST_SUITE_P(Ops, OpErrorTest, ::testing::ValuesIn(shape_cases()),
                         [](const auto& test) { return test.param.name; });

TEST(OpErrors, WrongDtypeIsNamed) {
  ExecutionContext ctx(Device::cpu(), 1, 1);
  expect_error([&] { relu_forward(ctx, i64({2, 3})); }, ErrorCode::kInvalidArgument,
               {"relu_forward", "x must be f32", "i64[2, 3]"});
  expect_error([&] { softmax_cross_entropy_forward(ctx, f32({2, 3}), f32({2})); }, ErrorCode::kInvalidArgument,
               {"softmax_cross_entropy_forward", "labels must be i64", "f32[2]"});
  expect_error([&] { conv2d_forward(ctx, {}, f32({1, 1, 3, 3}), Tensor::zeros({1, 1, 1, 1}, DType::kBF16)); },
               ErrorCode::kInvalidArgument, {"conv2d_forward", "w must be f32", "bf16[1, 1, 1, 1]"});
  expect_error([&] { sum(ctx, Tensor()); }, ErrorCode::kInvalidArgument, {"sum", "x is undefined"});
}

// Every op refuses a CUDA tensor on a CPU context, naming the op, the argument and both devices.
TEST(OpErrors, CudaTensorOnCpuContextIsAnError) {
  ExecutionContext ctx(Device::cpu(), 1, 1);
  Tensor x = cuda_tensor({2, 3, 8, 8});
  std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"conv2d_forward", [&] { conv2d_forward(ctx, {}, x, f32({4, 3, 3, 3})); }},
      {"conv2d_backward_data", [&] { conv2d_backward_data(ctx, {}, x, f32({3, 3, 1, 1}), {2, 3, 8, 8}); }},
      {"conv2d_backward_weights", [&] { conv2d_backward_weights(ctx, {}, x, x, {3, 3, 1, 1}, false); }},
      {"batchnorm_forward_inference",
       [&] { batchnorm_forward_inference(ctx, {}, x, f32({3}), f32({3}), f32({3}), f32({3})); }},
      {"relu_forward", [&] { relu_forward(ctx, x); }},
      {"max_pool2d_forward", [&] { max_pool2d_forward(ctx, {}, x); }},
      {"avg_pool2d_forward", [&] { avg_pool2d_forward(ctx, {}, x); }},
      {"global_avg_pool_forward", [&] { global_avg_pool_forward(ctx, x); }},
      {"matmul", [&] { matmul(ctx, cuda_tensor({2, 3}), f32({3, 2})); }},
      {"linear_forward", [&] { linear_forward(ctx, f32({2, 3}), cuda_tensor({2, 3})); }},
      {"add", [&] { add(ctx, f32({2, 3, 8, 8}), x); }},
      {"sum", [&] { sum(ctx, x); }},
      {"dropout_forward", [&] { dropout_forward(ctx, x, 0.5f); }},
      {"softmax_cross_entropy_forward", [&] { softmax_cross_entropy_forward(ctx, cuda_tensor({2, 3}), i64({2})); }},
  };
  for (const auto& [op, call] : calls) {
    SCOPED_TRACE(op);
    expect_error(call, ErrorCode::kInvalidArgument, {op, "is on cuda:0", "the context runs on cpu"});
  }
}

}  // namespace
}  // namespace tandem::backend::testing
