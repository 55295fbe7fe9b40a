// Layers without parameters: activations, pooling, reshaping, dropout, and Sequential.
#include <string>

#include "engine/nn/layers.h"

namespace tandem::nn {
namespace {

autograd::Pool2dParams pool_params(int64_t kernel, int64_t stride, int64_t padding, bool count_include_pad) {
  TANDEM_CHECK(kernel > 0 && stride > 0 && padding >= 0 && 2 * padding <= kernel, ErrorCode::kInvalidArgument,
               "pooling: kernel {} and stride {} must be positive and padding {} at most half the kernel", kernel,
               stride, padding);
  autograd::Pool2dParams p;
  p.kernel = {kernel, kernel};
  p.stride = {stride, stride};
  p.padding = {padding, padding};
  p.count_include_pad = count_include_pad;
  return p;
}

}  // namespace

Variable ReLU::forward(ExecutionContext& ctx, const Variable& x) { return autograd::relu(ctx, x); }
Variable Sigmoid::forward(ExecutionContext& ctx, const Variable& x) { return autograd::sigmoid(ctx, x); }
Variable SiLU::forward(ExecutionContext& ctx, const Variable& x) { return autograd::silu(ctx, x); }
Variable Tanh::forward(ExecutionContext& ctx, const Variable& x) { return autograd::tanh(ctx, x); }

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : params_(pool_params(kernel_size, stride, padding, true)) {}

Variable MaxPool2d::forward(ExecutionContext& ctx, const Variable& x) { return autograd::max_pool2d(ctx, x, params_); }

AvgPool2d::AvgPool2d(int64_t kernel_size, int64_t stride, int64_t padding, bool count_include_pad)
    : params_(pool_params(kernel_size, stride, padding, count_include_pad)) {}

Variable AvgPool2d::forward(ExecutionContext& ctx, const Variable& x) { return autograd::avg_pool2d(ctx, x, params_); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int64_t output_size) {
  TANDEM_CHECK(output_size == 1, ErrorCode::kUnimplemented,
               "AdaptiveAvgPool2d: only output size 1 (global average pooling) is provided, got {}", output_size);
}

Variable AdaptiveAvgPool2d::forward(ExecutionContext& ctx, const Variable& x) {
  return autograd::global_avg_pool(ctx, x);
}

Variable Flatten::forward(ExecutionContext& ctx, const Variable& x) { return autograd::flatten(ctx, x); }

Dropout::Dropout(float p) : p_(p) {
  TANDEM_CHECK(p >= 0.0f && p < 1.0f, ErrorCode::kInvalidArgument, "Dropout: p must be in [0, 1), got {}", p);
}

Variable Dropout::forward(ExecutionContext& ctx, const Variable& x) {
  return is_training() ? autograd::dropout(ctx, x, p_) : x;
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<Module> module) { push_back(std::to_string(modules_.size()), module); }

void Sequential::push_back(const std::string& name, std::shared_ptr<Module> module) {
  register_module(name, module);
  modules_.push_back(std::move(module));
}

Variable Sequential::forward(ExecutionContext& ctx, const Variable& x) {
  Variable y = x;
  for (auto& m : modules_) y = m->forward(ctx, y);
  return y;
}

}  // namespace tandem::nn
