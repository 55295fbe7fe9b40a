// Differentiable ops: each computes its result with the backend kernels and records a
// backward that calls the matching backward kernels. Every op takes the replica's context,
// which the backward refers to: it must outlive the graph (until backward has run).
#pragma once

#include "engine/autograd/variable.h"
#include "engine/backend/op_params.h"

namespace tandem::autograd {

using backend::BatchNormParams;
using backend::Conv2dParams;
using backend::Pool2dParams;

// (N, C, H, W) x, (K, C / groups, R, S) w, (K) b or undefined -> (N, K, P, Q)
Variable conv2d(ExecutionContext& ctx, const Variable& x, const Variable& w, const Variable& b,
                const Conv2dParams& params);
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
// (N, in) x, (out, in) w, (out) b or undefined -> (N, out)
Variable linear(ExecutionContext& ctx, const Variable& x, const Variable& w, const Variable& b);
Variable matmul(ExecutionContext& ctx, const Variable& a, const Variable& b);
Variable add(ExecutionContext& ctx, const Variable& a, const Variable& b);
// relu(a + b) in one pass each way: a residual block's end. Both inputs get the same gradient tensor.
Variable add_relu(ExecutionContext& ctx, const Variable& a, const Variable& b);
Variable mul(ExecutionContext& ctx, const Variable& a, const Variable& b);
Variable scale(ExecutionContext& ctx, const Variable& x, float alpha);
Variable sum(ExecutionContext& ctx, const Variable& x);  // shape []
// Same elements, another shape; a channels_last input is first made contiguous.
Variable reshape(ExecutionContext& ctx, const Variable& x, const Shape& shape);
Variable flatten(ExecutionContext& ctx, const Variable& x);  // (N, ...) -> (N, rest)
Variable dropout(ExecutionContext& ctx, const Variable& x, float p);
// (N, K) logits, (N) i64 labels -> (N) per-example losses.
Variable softmax_cross_entropy(ExecutionContext& ctx, const Variable& logits, const Tensor& labels,
                               float label_smoothing = 0.0f);
// The loss contract of DESIGN.md: sum of per-example losses divided by `divisor` (the global
// batch size), a scalar. With one replica and divisor = batch size it is the mean.
Variable cross_entropy_loss(ExecutionContext& ctx, const Variable& logits, const Tensor& labels,
                            float label_smoothing, int64_t divisor);

}  // namespace tandem::autograd
