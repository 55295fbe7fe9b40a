// The ONNX forms of the ops the registry's models do not reach (masked attention, pooling with
// padding, reductions over chosen dims, expand, masked_fill, a layer norm without weight, ...),
// held to Tandem's forward under onnxruntime; and what the check trace catches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"
#include "engine/export/onnx_export.h"
#include "engine/nn/layers.h"
#include "tests/support/onnxruntime.h"
#include "tests/support/temp_dir.h"

namespace tandem::exporter {
namespace {

using autograd::Variable;

Tensor normal(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n;
  Tensor t = Tensor::empty(shape);
  std::generate_n(t.data<float>(), t.numel(), [&] { return n(rng); });
  return t;
}

// A mask where query row 1 sees no key, and the rest a band.
Tensor band_mask(int64_t t) {
  Tensor m = Tensor::zeros({t, t}, DType::kU8);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < t; ++j) m.data<uint8_t>()[i * t + j] = i != 1 && std::abs(i - j) <= 1;
  }
  return m;
}

// Two attentions: one with a mask that blocks a whole row, one causal with more queries than keys
// (the first queries see nothing); Tandem gives zeros there, and so must the file.
class MaskedAttention : public nn::Module {
 public:
  Variable forward(ExecutionContext& ctx, const Variable& x) override {  // (B, H, 6, D)
    Variable a = autograd::scaled_dot_product_attention(ctx, x, x, x, band_mask(6));
    Variable k = autograd::narrow(ctx, x, 2, 0, 4);
    Variable b = autograd::scaled_dot_product_attention(ctx, a, k, k, {}, 0.0f, true);
    return autograd::add(ctx, a, b);
  }
};

// Pooling with padding, reductions over chosen dims, expand, masked_fill, a layer norm with a bias
// and no weight, and the pointwise functions, with a dynamic batch.
class Mixed : public nn::Module {
 public:
  Mixed() { bias_ = register_parameter("bias", normal({6}, 3)); }
  Variable forward(ExecutionContext& ctx, const Variable& x) override {  // (N, 4, 6, 6)
    const int64_t n = x.shape()[0];
    autograd::Pool2dParams pool{.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}, .count_include_pad = false};
    Variable a = autograd::avg_pool2d(ctx, x, pool);
    const int hw[] = {2, 3}, channels[] = {1}, last[] = {-1};
    Variable peak = autograd::expand(ctx, autograd::amax(ctx, a, hw, true), Shape{n, 4, 6, 6});
    Variable centred = autograd::div(ctx, autograd::sub(ctx, a, peak), autograd::exp(ctx, autograd::mean(ctx, a, last, true)));
    Variable filled = autograd::masked_fill(ctx, centred, band_mask(6), -1.5f);
    Variable normed = autograd::layer_norm(ctx, filled, 1, Variable(), bias_);
    Variable probs = autograd::log_softmax(ctx, normed, 1);
    Variable smooth = autograd::tanh(ctx, autograd::scale(ctx, probs, 0.5f));
    Variable pos = autograd::rsqrt(ctx, autograd::sqrt(ctx, autograd::exp(ctx, x)));
    Variable total = autograd::reshape(ctx, autograd::sum(ctx, a, channels, false), Shape{n, 1, 6, 6});
    Variable act = autograd::add(ctx, autograd::silu(ctx, smooth), autograd::sigmoid(ctx, pos));
    Variable waves = autograd::add(ctx, autograd::sin(ctx, act), autograd::cos(ctx, autograd::abs(ctx, smooth)));
    Variable y = autograd::add(ctx, autograd::add(ctx, waves, pos), total);
    return autograd::reshape(ctx, y, Shape{n, 144});
  }

 private:
  Variable bias_;
};

void expect_onnxruntime_agrees(nn::Module& model, const OnnxInputSpec& spec, const Tensor& x, int opset = 17) {
  if (std::string reason = testing::onnxruntime_skip_reason(); !reason.empty()) GTEST_SKIP() << reason;
  testing::TempDir dir;
  export_onnx(model, spec, dir / "m.onnx", {.opset = opset});
  model.eval();
  ExecutionContext ctx;
  const std::vector<float> ours = model.forward(ctx, Variable(x)).value().to_vector();
  const testing::OnnxRuntimeOutput theirs = testing::run_onnxruntime(dir / "m.onnx", spec.name, x);
  ASSERT_EQ(theirs.values.size(), ours.size());
  float largest = 0;
  for (float v : ours) largest = std::max(largest, std::abs(v));
  for (size_t i = 0; i < ours.size(); ++i) {
    ASSERT_FALSE(std::isnan(theirs.values[i])) << "onnxruntime gave NaN at " << i << " where Tandem gave " << ours[i];
    ASSERT_NEAR(theirs.values[i], ours[i], 1e-4f * std::max(largest, 1.0f)) << "at " << i;
  }
}

TEST(OnnxExportOps, MaskedAndCausalAttentionGiveZerosWhereNoKeyIsSeen) {
  MaskedAttention model;
  OnnxInputSpec spec;
  spec.shape = {2, 2, 6, 4};
  expect_onnxruntime_agrees(model, spec, normal({3, 2, 6, 4}, 5));
}

TEST(OnnxExportOps, PoolingReductionsExpandMasksAndLayerNormWithoutWeight) {
  Mixed model;
  OnnxInputSpec spec;
  spec.shape = {2, 4, 6, 6};
  expect_onnxruntime_agrees(model, spec, normal({3, 4, 6, 6}, 6));
}

TEST(OnnxExportOps, AConvolutionalModelRunsAtOpset13) {
  nn::Sequential model(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions{.in_channels = 3, .out_channels = 4, .padding = 1}),
      std::make_shared<nn::BatchNorm2d>(4, 1e-5f, 0.1f, true), std::make_shared<nn::MaxPool2d>(2, 2),
      std::make_shared<nn::AdaptiveAvgPool2d>(1), std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(4, 3)});
  OnnxInputSpec spec;
  spec.shape = {2, 3, 8, 8};
  expect_onnxruntime_agrees(model, spec, normal({4, 3, 8, 8}, 7), 13);
}

// A pooled length that is 4 for both 8 and 7 rows: the probe alone would take it for a constant.
class PoolThenFlatten : public nn::Module {
 public:
  Variable forward(ExecutionContext& ctx, const Variable& x) override {
    autograd::Pool2dParams p{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
    return autograd::flatten(ctx, autograd::max_pool2d(ctx, x, p));
  }
};

// A kernel of half the height: an attribute that follows the input's size.
class HalfHeightPool : public nn::Module {
 public:
  Variable forward(ExecutionContext& ctx, const Variable& x) override {
    const int64_t k = x.shape()[2] / 2;
    autograd::Pool2dParams p{.kernel = {k, 1}, .stride = {k, 1}};
    return autograd::global_avg_pool(ctx, autograd::avg_pool2d(ctx, x, p));
  }
};

// Computed from the input by a backend call the tape never saw.
class Untraced : public nn::Module {
 public:
  Variable forward(ExecutionContext& ctx, const Variable& x) override {
    return autograd::relu(ctx, Variable(backend::scale(ctx, x.value(), 2.0f)));
  }
};

std::string export_error(nn::Module& model, const OnnxInputSpec& spec) {
  try {
    export_onnx_bytes(model, spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(OnnxExportOps, TheCheckTraceRefusesWhatTheFileCouldNotCompute) {
  OnnxInputSpec height;
  height.shape = {1, 2, 8, 8};
  height.dynamic_axes = {{0, "batch"}, {2, "height"}};
  PoolThenFlatten pooled;
  EXPECT_NE(export_error(pooled, height).find("is not a product of the input's dynamic sizes"), std::string::npos)
      << export_error(pooled, height);
  HalfHeightPool half;
  EXPECT_NE(export_error(half, height).find("its kernel changes with the size of the input"), std::string::npos)
      << export_error(half, height);
  // Without a dynamic axis too: the check pass draws other values.
  OnnxInputSpec fixed;
  fixed.shape = {2, 4};
  fixed.dynamic_axes = {};
  Untraced untraced;
  EXPECT_NE(export_error(untraced, fixed).find("built outside Tandem's ops"), std::string::npos)
      << export_error(untraced, fixed);
}

TEST(OnnxExportOps, EachSubmodulesModeIsRestored) {
  nn::Sequential model(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions{.in_channels = 4, .out_channels = 4, .kernel_size = 1}),
      std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>()});
  auto children = model.named_children();
  children[1].second->eval();  // a frozen batch norm inside a model in training mode
  OnnxInputSpec spec;
  spec.shape = {2, 4, 3, 3};
  export_onnx_bytes(model, spec);
  EXPECT_TRUE(model.is_training());
  EXPECT_TRUE(children[0].second->is_training());
  EXPECT_FALSE(children[1].second->is_training());
}

}  // namespace
}  // namespace tandem::exporter
