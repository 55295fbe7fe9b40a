// Modules: names, state dicts, initialisation, train/eval behaviour of the layers.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/backend/ops.h"
#include "engine/nn/init.h"
#include "engine/nn/layers.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::nn {
namespace {

std::shared_ptr<Sequential> conv_block() {
  auto seq = std::make_shared<Sequential>();
  seq->push_back(std::make_shared<Conv2d>(Conv2dOptions{.in_channels = 3, .out_channels = 4, .bias = false}));
  seq->push_back(std::make_shared<BatchNorm2d>(4));
  seq->push_back(std::make_shared<ReLU>());
  return seq;
}

TEST(Module, DottedNamesFollowTorchConventions) {
  auto outer = std::make_shared<Sequential>();
  outer->push_back(conv_block());
  outer->push_back(std::make_shared<Linear>(4, 2));
  std::vector<std::string> names;
  for (auto& [name, p] : outer->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.0.weight", "0.1.weight", "0.1.bias", "1.weight", "1.bias"}));
  std::vector<std::string> buffers;
  for (auto& [name, b] : outer->named_buffers()) buffers.push_back(name);
  EXPECT_EQ(buffers, (std::vector<std::string>{"0.1.running_mean", "0.1.running_var", "0.1.num_batches_tracked"}));
  EXPECT_EQ(outer->state_dict().size(), 8u);
}

TEST(Module, AnUnconstructedChildModuleIsAnErrorNamingIt) {
  Sequential seq;
  std::shared_ptr<Linear> never_made;
  try {
    seq.push_back("head", never_made);
    FAIL() << "a null child module was registered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("child module 'head' is null"), std::string::npos) << e.what();
  }
  EXPECT_EQ(seq.size(), 0u);
}

TEST(Module, StateDictRoundTripAndStrictErrors) {
  init::manual_seed(1);
  auto a = conv_block();
  init::manual_seed(2);
  auto b = conv_block();
  EXPECT_NE(a->state_dict()["0.weight"].to_vector(), b->state_dict()["0.weight"].to_vector());
  b->load_state_dict(a->state_dict());
  EXPECT_EQ(a->state_dict()["0.weight"].to_vector(), b->state_dict()["0.weight"].to_vector());

  auto state = a->state_dict();
  state.erase("1.running_var");
  try {
    b->load_state_dict(state);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1.running_var"), std::string::npos) << e.what();
  }
  state = a->state_dict();
  state["1.weight"] = Tensor::zeros({5});
  EXPECT_THROW(b->load_state_dict(state), Error);
  state = a->state_dict();
  state["extra.weight"] = Tensor::zeros({1});
  EXPECT_THROW(b->load_state_dict(state), Error);
  EXPECT_NO_THROW(b->load_state_dict(state, /*strict=*/false));
}

TEST(Init, KaimingFanOutAndLinearBounds) {
  init::manual_seed(7);
  Conv2d conv(Conv2dOptions{.in_channels = 64, .out_channels = 128, .kernel_size = 3, .bias = false});
  std::vector<float> w = conv.weight().value().to_vector();
  double sq = 0;
  for (float v : w) sq += static_cast<double>(v) * v;
  double expected_std = std::sqrt(2.0 / (128 * 9));
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(w.size())), expected_std, expected_std * 0.02);

  Linear fc(100, 10);
  float bound = 0.1f;
  for (auto& [name, p] : fc.named_parameters()) {
    for (float v : p.value().to_vector()) {
      EXPECT_LE(std::fabs(v), bound) << name;
    }
  }
  BatchNorm2d bn(3);
  EXPECT_EQ(bn.weight().value().to_vector(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(bn.bias().value().to_vector(), (std::vector<float>{0, 0, 0}));
}

TEST(BatchNorm2d, TrainingMovesRunningStatisticsAndEvalUsesThem) {
  ExecutionContext ctx;
  BatchNorm2d bn(2);
  std::vector<float> x(2 * 2 * 3 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 9) + ((i / 9) % 2 == 1 ? 10.0f : 0.0f);
  Variable input(Tensor::from_vector(x, {2, 2, 3, 3}));
  bn.forward(ctx, input);
  std::vector<float> mean = bn.state_dict()["running_mean"].to_vector();
  // Channel 0 holds 0..8 (mean 4), channel 1 holds 10..18 (mean 14); momentum 0.1 from 0.
  EXPECT_NEAR(mean[0], 0.4f, 1e-5);
  EXPECT_NEAR(mean[1], 1.4f, 1e-5);
  EXPECT_EQ(bn.state_dict()["num_batches_tracked"].data<int64_t>()[0], 1);
  bn.eval();
  std::vector<float> y = bn.forward(ctx, input).value().to_vector();
  // Eval: (x - running_mean) / sqrt(running_var + eps). Channel 0 holds 0..8 twice: biased
  // variance 20/3, unbiased 20/3 * 18/17, so running_var = 0.9 + 0.1 * that.
  float running_var = 0.9f + 0.1f * (20.0f / 3.0f) * (18.0f / 17.0f);
  EXPECT_NEAR(y[0], (0.0f - 0.4f) / std::sqrt(running_var + 1e-5f), 1e-5);
}

TEST(BatchNorm2d, ForwardAddReluIsForwardThenAddReluInTrainingAndEval) {
  ExecutionContext ctx(Device::cpu(), 2, 1);
  BatchNorm2d fused(16), pair(16);
  std::vector<float> x(2 * 16 * 3 * 3), s(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f + 1.0f;
    s[i] = std::cos(0.71f * static_cast<float>(i));
  }
  Variable input(Tensor::from_vector(x, {2, 16, 3, 3}).to_format(MemoryFormat::kChannelsLast));
  Variable shortcut(Tensor::from_vector(s, {2, 16, 3, 3}).to_format(MemoryFormat::kChannelsLast));
  for (bool training : {true, false}) {
    if (!training) {
      fused.eval();
      pair.eval();
    }
    std::vector<float> got = fused.forward_add_relu(ctx, input, shortcut).value().to_vector();
    std::vector<float> want = autograd::add_relu(ctx, pair.forward(ctx, input), shortcut).value().to_vector();
    EXPECT_EQ(got, want) << (training ? "training" : "eval");
    EXPECT_EQ(fused.state_dict()["running_var"].to_vector(), pair.state_dict()["running_var"].to_vector());
  }
  EXPECT_EQ(fused.state_dict()["num_batches_tracked"].data<int64_t>()[0], 1);
  BatchNorm2d clipped(16, 1e-5f, 0.1f, /*fuse_relu=*/true);
  EXPECT_THROW(clipped.forward_add_relu(ctx, input, shortcut), Error);
}

// Under precision: bf16 on the CPU, a batch norm between convolutions that keeps its activations in
// bf16 hands the convolutions the very operands they rounded themselves before: the same loss and
// gradients bit for bit, with its output stored in bf16 in training and in f32 in eval.
TEST(BatchNorm2d, KeepingBf16ActivationsChangesNoBitOfAConvolutionChain) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext ctx(Device::cpu(), 2, 1, KernelOptions{.precision = Precision::kBf16});
  Conv2d conv1({.in_channels = 3, .out_channels = 16, .padding = 1, .bias = false});
  Conv2d conv2({.in_channels = 16, .out_channels = 16, .padding = 1, .bias = false});
  BatchNorm2d plain(16, 1e-5f, 0.1f, /*fuse_relu=*/true), kept(16, 1e-5f, 0.1f, /*fuse_relu=*/true);
  kept.keep_bf16_activations(true);
  std::vector<float> x(2 * 3 * 6 * 6);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  Variable input(Tensor::from_vector(x, {2, 3, 6, 6}).to_format(MemoryFormat::kChannelsLast));
  auto run = [&](BatchNorm2d& bn, DType expected) {
    for (auto* conv : {&conv1, &conv2}) {
      for (auto& [name, p] : conv->named_parameters()) p.zero_grad();
    }
    Variable middle = bn.forward(ctx, conv1.forward(ctx, input));
    EXPECT_EQ(middle.value().dtype(), expected);
    Variable loss = autograd::sum(ctx, conv2.forward(ctx, middle));
    loss.backward(&ctx);
    return std::vector<std::vector<float>>{loss.value().to_vector(), conv1.weight().grad().to_vector(),
                                           conv2.weight().grad().to_vector()};
  };
  EXPECT_EQ(run(kept, DType::kBF16), run(plain, DType::kF32));
  kept.eval();
  EXPECT_EQ(kept.forward(ctx, conv1.forward(ctx, input)).value().dtype(), DType::kF32);
  ExecutionContext f32_ctx(Device::cpu(), 2, 1);
  kept.train();
  EXPECT_EQ(kept.forward(f32_ctx, conv1.forward(f32_ctx, input)).value().dtype(), DType::kF32);
}

// A convolution that keeps its output in bf16 (training, precision: bf16) hands its batch norm the
// f32 output rounded once: the chain trains with the loss and gradients of a batch norm fed that
// rounded output in f32; eval mode and an fp32 context keep f32.
TEST(Conv2d, KeepingBf16ActivationsFeedsTheBatchNormTheRoundedOutput) {
  TANDEM_REQUIRE_BF16_CPU();
  ExecutionContext ctx(Device::cpu(), 2, 1, KernelOptions{.precision = Precision::kBf16});
  Conv2d conv({.in_channels = 3, .out_channels = 16, .padding = 1, .bias = false});
  Conv2d head({.in_channels = 16, .out_channels = 4, .padding = 1, .bias = false});
  BatchNorm2d bn(16, 1e-5f, 0.1f, /*fuse_relu=*/true);
  bn.keep_bf16_activations(true);
  std::vector<float> x(2 * 3 * 6 * 6);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.41f * static_cast<float>(i));
  Variable input(Tensor::from_vector(x, {2, 3, 6, 6}).to_format(MemoryFormat::kChannelsLast));
  auto run = [&](bool keep) {
    conv.keep_bf16_activations(keep);
    conv.weight().zero_grad();
    head.weight().zero_grad();
    Variable y = conv.forward(ctx, input);
    EXPECT_EQ(y.value().dtype(), keep ? DType::kBF16 : DType::kF32);
    if (!keep) {  // round the f32 output as the kept one is rounded, then widen it back for the batch norm
      Tensor widened = Tensor::empty(y.shape(), DType::kF32, Device::cpu(), y.value().format());
      backend::widen_from_bf16(ctx, backend::bf16_operand(ctx, y.value()), widened);
      y = autograd::add(ctx, y, Variable(backend::add(ctx, widened, backend::scale(ctx, y.value(), -1.0f))));
    }
    Variable loss = autograd::sum(ctx, head.forward(ctx, bn.forward(ctx, y)));
    loss.backward(&ctx);
    return std::vector<std::vector<float>>{loss.value().to_vector(), conv.weight().grad().to_vector()};
  };
  std::vector<std::vector<float>> kept = run(true), rounded = run(false);
  EXPECT_EQ(kept[0], rounded[0]);
  EXPECT_EQ(kept[1], rounded[1]);
  conv.keep_bf16_activations(true);
  conv.eval();
  EXPECT_EQ(conv.forward(ctx, input).value().dtype(), DType::kF32);
  conv.train();
  ExecutionContext f32_ctx(Device::cpu(), 2, 1);
  EXPECT_EQ(conv.forward(f32_ctx, input).value().dtype(), DType::kF32);
}

TEST(Dropout, IdentityInEvalAndScaledInTraining) {
  ExecutionContext ctx;
  Dropout drop(0.5f);
  Variable x(Tensor::from_vector(std::vector<float>(1000, 1.0f), {1000}));
  std::vector<float> y = drop.forward(ctx, x).value().to_vector();
  int kept = 0;
  for (float v : y) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
    kept += v != 0.0f;
  }
  EXPECT_NEAR(kept, 500, 80);
  drop.eval();
  EXPECT_EQ(drop.forward(ctx, x).value().to_vector(), x.value().to_vector());
}

}  // namespace
}  // namespace tandem::nn
