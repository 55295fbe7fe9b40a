// The parameters of the backend's ops (convolution, pooling, batch norm, optimizer updates): the
// public half of kernels.h, which ops.h and the layers above need; the kernel table itself is
// internal to the backends.
#pragma once

#include <array>
#include <cstdint>

#include "engine/core/context.h"
#include "engine/core/tensor.h"

namespace tandem::backend {

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

struct Pool2dParams {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{2, 2};
  std::array<int64_t, 2> padding{0, 0};
  bool count_include_pad = true;  // average pooling only, as PyTorch's AvgPool2d default
};

struct BatchNormParams {
  float eps = 1e-5f;
  float momentum = 0.1f;   // running = (1 - momentum) * running + momentum * batch statistic
  bool fuse_relu = false;  // y = relu(bn(x)); backward masks dy by y > 0 itself
  // Under precision: bf16, on a device that keeps activations in bf16 (KernelTable::from_bf16),
  // training stores y in bf16 and the backward's dx too: for a layer whose input is a
  // convolution's output alone and whose output goes to convolutions, to other batch norms'
  // shortcuts and to pooling (a ResNet's), which all read bf16. The statistics stay f32.
  bool bf16_activations = false;
};

// What training-mode batch norm keeps for its backward pass.
struct BatchNormSaved {
  Tensor mean;    // (C) f32, the batch mean
  Tensor invstd;  // (C) f32, 1 / sqrt(biased batch variance + eps)
  Tensor workspace;  // backend-defined (for example the fused ReLU mask); may be undefined
};

// Pointwise functions of one tensor (ops.h's unary), each with its derivative (unary_backward).
// GELU as PyTorch's: kGeluErf is x Phi(x) (approximate='none'), kGeluTanh the tanh approximation.
// kSilu is x sigmoid(x) (F.silu); kAbs's derivative at 0 is 0, as torch.abs's.
enum class UnaryOp : uint8_t { kExp, kLog, kSqrt, kRsqrt, kTanh, kGeluErf, kGeluTanh, kSigmoid, kSilu, kAbs, kSin, kCos };
enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv };
// torch.eq, ne, lt, le, gt, ge: a u8 result, 1 where a op b holds (never for a NaN but ne).
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
// max is torch.amax's: tied maxima share the gradient.
enum class Reduction : uint8_t { kSum, kMean, kMax };

// Labels equal to ignore_index take no part in cross-entropy (loss 0, gradient 0), as PyTorch's
// ignore_index; the default ignores nothing.
inline constexpr int64_t kNoIgnoreIndex = INT64_MIN;

// scaled_dot_product_attention: softmax(q k^T scale + mask) v with dropout on the probabilities.
// causal hides key j from query i when j > i + (Tk - Tq) (aligned bottom-right: equal to PyTorch's
// is_causal when Tq == Tk, and a key/value cache's new queries see the whole past). Dropout draws
// by position from dropout_seed (engine/backend/attention_math.h), the same on every backend.
struct AttentionParams {
  float scale = 1.0f;
  bool causal = false;
  float dropout_p = 0.0f;
  uint64_t dropout_seed = 0;
};

// PyTorch's SGD: d = dw + weight_decay w; v = momentum v + (1 - dampening) d (v = d on the
// first step); d = d + momentum v (nesterov) or v; w -= lr d.
struct SgdParams {
  float lr = 0.1f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffers hold nothing yet
};

// PyTorch's AdamW: w *= 1 - lr weight_decay; m, v moving averages of dw and dw^2;
// w -= lr m_hat / (sqrt(v_hat) + eps) with bias corrections for `step` (1-based).
struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  int64_t step = 1;
};

// rand / randn: element i of y from the counter-based stream of `seed` (philox.h), so every backend
// draws the same numbers whatever its launch geometry.
struct RandomFillParams {
  uint64_t seed = 0;
  bool normal = false;  // false: uniform in [a, b); true: normal with mean a and standard deviation b
  float a = 0.0f;
  float b = 1.0f;
};

using Ctx = ExecutionContext;

}  // namespace tandem::backend
