// Differentiable ops: each computes its result with the backend kernels and records a
// backward that calls the matching backward kernels. Every op takes the replica's context,
// which the backward refers to: it must outlive the graph (until backward has run).
#pragma once

#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "engine/autograd/variable.h"
#include "engine/backend/op_params.h"

namespace tandem::autograd {

using backend::BatchNormParams;
using backend::Conv2dParams;
using backend::Pool2dParams;

// (N, C, H, W) x, (K, C / groups, R, S) w, (K) b or undefined -> (N, K, P, Q). bf16_output: y in
// bf16 where backend::conv2d_forward gives it (for a training batch norm with bf16 activations).
Variable conv2d(ExecutionContext& ctx, const Variable& x, const Variable& w, const Variable& b,
                const Conv2dParams& params, bool bf16_output = false);
// Training mode: batch statistics, running statistics updated in place.
Variable batchnorm_training(ExecutionContext& ctx, const Variable& x, const Variable& gamma, const Variable& beta,
                            Tensor& running_mean, Tensor& running_var, const BatchNormParams& params);
// relu(batchnorm_training(x) + shortcut), a residual block's end, in one pass after the statistics
// where the device can (see backend::batchnorm_add_relu_forward_training); params.fuse_relu is not read.
Variable batchnorm_add_relu_training(ExecutionContext& ctx, const Variable& x, const Variable& gamma,
                                     const Variable& beta, const Variable& shortcut, Tensor& running_mean,
                                     Tensor& running_var, const BatchNormParams& params);
// Inference mode: running statistics. No gradient flows back through it yet: backward is an
// Unimplemented error (train the layer, or keep it out of the loss's graph).
Variable batchnorm_inference(ExecutionContext& ctx, const Variable& x, const Variable& gamma,
                             const Variable& beta, const Tensor& running_mean, const Tensor& running_var,
                             const BatchNormParams& params);
Variable relu(ExecutionContext& ctx, const Variable& x);
Variable max_pool2d(ExecutionContext& ctx, const Variable& x, const Pool2dParams& params);
Variable avg_pool2d(ExecutionContext& ctx, const Variable& x, const Pool2dParams& params);
Variable global_avg_pool(ExecutionContext& ctx, const Variable& x);  // (N, C, H, W) -> (N, C, 1, 1)
// (N..., in) x, (out, in) w, (out) b or undefined -> (N..., out). bf16_output: under precision: bf16,
// where the device keeps activations in bf16, y is stored in bf16, rounded once from the f32
// accumulation plus the bias's bf16 shadow (backend::linear_forward): for a layer whose output only
// feeds products that round it anyway (packed_self_attention's qkv). The backward is unchanged.
Variable linear(ExecutionContext& ctx, const Variable& x, const Variable& w, const Variable& b,
                bool bf16_output = false);
// torch.matmul of matrices: (..., M, K) a, (..., K, N) b, batch dimensions broadcast.
Variable matmul(ExecutionContext& ctx, const Variable& a, const Variable& b);
// a + b, a - b, a * b, a / b with NumPy broadcasting; the gradient of a broadcast input is summed
// back to its shape.
Variable add(ExecutionContext& ctx, const Variable& a, const Variable& b);
Variable sub(ExecutionContext& ctx, const Variable& a, const Variable& b);
Variable div(ExecutionContext& ctx, const Variable& a, const Variable& b);
// relu(a + b) in one pass each way: a residual block's end. Both inputs get the same gradient tensor.
Variable add_relu(ExecutionContext& ctx, const Variable& a, const Variable& b);
Variable mul(ExecutionContext& ctx, const Variable& a, const Variable& b);
Variable scale(ExecutionContext& ctx, const Variable& x, float alpha);
Variable sum(ExecutionContext& ctx, const Variable& x);  // shape []
// Same elements, another shape; a channels_last input is first made contiguous.
Variable reshape(ExecutionContext& ctx, const Variable& x, const Shape& shape);
// torch.reshape's sizes: one of them may be -1, inferred from x's element count
// (reshape(ctx, x, {batch, -1}); a braced list picks this overload).
Variable reshape(ExecutionContext& ctx, const Variable& x, std::initializer_list<int64_t> sizes);
Variable reshape(ExecutionContext& ctx, const Variable& x, std::span<const int64_t> sizes);
// The shape `sizes` gives x's numel elements, -1 inferred; InvalidArgument with PyTorch's message.
Shape infer_reshape(std::span<const int64_t> sizes, int64_t numel);
Variable flatten(ExecutionContext& ctx, const Variable& x);  // (N, ...) -> (N, rest)
Variable dropout(ExecutionContext& ctx, const Variable& x, float p);
// (N..., K) logits, (N...) i64 labels -> (N...) per-example losses; rows labelled ignore_index
// lose 0 and pass no gradient.
Variable softmax_cross_entropy(ExecutionContext& ctx, const Variable& logits, const Tensor& labels,
                               float label_smoothing = 0.0f, int64_t ignore_index = backend::kNoIgnoreIndex);
// The loss contract of DESIGN.md: sum of per-example losses divided by `divisor` (the global
// batch size), a scalar. With one replica and divisor = batch size it is the mean.
Variable cross_entropy_loss(ExecutionContext& ctx, const Variable& logits, const Tensor& labels,
                            float label_smoothing, int64_t divisor);

struct LinearCrossEntropyOptions {
  float label_smoothing = 0.0f;
  int64_t divisor = 1;  // the loss contract's: the global batch's row count
  int64_t ignore_index = backend::kNoIgnoreIndex;
  int64_t chunk_elements = 0;  // logits computed at once; 0: 2^25 (128 MiB of f32)
};
// cross_entropy_loss(linear(x, w), labels, ...) for a bias-free (V, C) w and (N..., C) x, without the
// (N..., V) logits: a chunk of rows at a time goes through the product, the loss and its gradient
// (ops_classifier.cpp). Loss and gradients agree with the unfused ops within rounding (on the CPU,
// bit for bit while one chunk holds every row). Gradients are computed during the forward (for a
// unit dloss, scaled in backward), so call it under NoGradGuard when none is wanted.
Variable linear_cross_entropy_loss(ExecutionContext& ctx, const Variable& x, const Variable& w, const Tensor& labels,
                                   const LinearCrossEntropyOptions& options = {});

// ---- N-D ops with PyTorch's semantics (ops_tensor.cpp); dims may be negative. ----
Variable permute(ExecutionContext& ctx, const Variable& x, std::span<const int> dims);
Variable transpose(ExecutionContext& ctx, const Variable& x, int dim0, int dim1);
// x broadcast to shape (NumPy rules); the gradient is summed back to x's shape.
Variable expand(ExecutionContext& ctx, const Variable& x, const Shape& shape);
Variable narrow(ExecutionContext& ctx, const Variable& x, int dim, int64_t start, int64_t length);
// Pieces of split_size along dim (the last may be shorter), as torch.split with an int.
std::vector<Variable> split(ExecutionContext& ctx, const Variable& x, int64_t split_size, int dim);
std::vector<Variable> chunk(ExecutionContext& ctx, const Variable& x, int64_t chunks, int dim);
Variable concat(ExecutionContext& ctx, std::span<const Variable> xs, int dim);  // torch.cat
Variable exp(ExecutionContext& ctx, const Variable& x);
Variable log(ExecutionContext& ctx, const Variable& x);
Variable sqrt(ExecutionContext& ctx, const Variable& x);
Variable rsqrt(ExecutionContext& ctx, const Variable& x);
Variable tanh(ExecutionContext& ctx, const Variable& x);
Variable sigmoid(ExecutionContext& ctx, const Variable& x);  // torch.sigmoid
Variable silu(ExecutionContext& ctx, const Variable& x);     // F.silu: x sigmoid(x)
Variable abs(ExecutionContext& ctx, const Variable& x);      // torch.abs: gradient 0 at 0
Variable sin(ExecutionContext& ctx, const Variable& x);
Variable cos(ExecutionContext& ctx, const Variable& x);
// Exact (erf) GELU, or PyTorch's approximate='tanh'. bf16_output: under precision: bf16, where
// the device takes bf16 operands (backend::bf16_operand), y is stored in bf16 (for a GELU whose
// output goes to linear layers alone); the backward reads x only.
Variable gelu(ExecutionContext& ctx, const Variable& x, bool tanh_approximation = false, bool bf16_output = false);
// value where mask (u8, broadcast to x) is not 0; those places pass no gradient.
Variable masked_fill(ExecutionContext& ctx, const Variable& x, const Tensor& mask, float value);
// Over dims (all when empty), as torch.sum / torch.mean / torch.amax (ties share the gradient).
Variable sum(ExecutionContext& ctx, const Variable& x, std::span<const int> dims, bool keepdim = false);
Variable mean(ExecutionContext& ctx, const Variable& x, std::span<const int> dims, bool keepdim = false);
Variable amax(ExecutionContext& ctx, const Variable& x, std::span<const int> dims, bool keepdim = false);
Variable softmax(ExecutionContext& ctx, const Variable& x, int dim);
Variable log_softmax(ExecutionContext& ctx, const Variable& x, int dim);

// ---- The transformer's ops (ops_transformer.cpp). ----
// Over the last normalized_dims dimensions; weight and bias (that many elements) may be undefined.
// bf16_output: as gelu's (the backward never reads y): for a norm whose output goes to linear layers.
Variable layer_norm(ExecutionContext& ctx, const Variable& x, int normalized_dims, const Variable& weight,
                    const Variable& bias, float eps = 1e-5f, bool bf16_output = false);
// F.scaled_dot_product_attention on (B, H, T, D): attn_mask u8 (true takes part) or f32 (added),
// broadcast over batch and heads; is_causal aligned bottom-right (backend::AttentionParams); scale
// 1 / sqrt(D) unless given. Memory-efficient: no (Tq, Tk) tensor is kept for the backward.
Variable scaled_dot_product_attention(ExecutionContext& ctx, const Variable& q, const Variable& k, const Variable& v,
                                      const Tensor& attn_mask = {}, float dropout_p = 0.0f, bool is_causal = false,
                                      std::optional<float> scale = std::nullopt);
// Self-attention of a packed projection: qkv (B, T, 3 H D), nn.Linear(C, 3C)'s output, -> (B, T, H D),
// the same values as splitting q, k and v into (B, H, T, D) heads, scaled_dot_product_attention and
// merging the heads back, without those copies where the device reads qkv by strides (CUDA). No mask.
// qkv may be bf16 (linear's bf16_output). bf16_output: as linear's, y stored in bf16 (rounded once),
// for an output that feeds the output projection alone, which rounds it anyway.
Variable packed_self_attention(ExecutionContext& ctx, const Variable& qkv, int64_t heads, float dropout_p = 0.0f,
                               bool is_causal = false, std::optional<float> scale = std::nullopt,
                               bool bf16_output = false);
// Rows of weight (V, D) by i64 ids of any shape -> (ids..., D).
Variable embedding(ExecutionContext& ctx, const Variable& weight, const Tensor& ids);

}  // namespace tandem::autograd
