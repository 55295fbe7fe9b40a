// The checked entry points to the kernels: each validates its arguments once (naming the op,
// the argument and both shapes on a mismatch), allocates outputs from the context's device
// allocator, and calls the kernel table of the context's device.
#pragma once

#include <vector>

#include "engine/backend/op_params.h"

namespace tandem::backend {

// Shapes of outputs, for planning and for tests.
Shape conv2d_output_shape(const Conv2dParams& p, const Shape& x, const Shape& w);
Shape pool2d_output_shape(const Pool2dParams& p, const Shape& x);

Tensor conv2d_forward(Ctx&, const Conv2dParams&, const Tensor& x, const Tensor& w, const Tensor& b = {});
Tensor conv2d_backward_data(Ctx&, const Conv2dParams&, const Tensor& dy, const Tensor& w, const Shape& x_shape);
// dx_sum += conv2d_backward_data(dy, w, dx_sum's shape): a gradient added into one already there.
void conv2d_backward_data_add(Ctx&, const Conv2dParams&, const Tensor& dy, const Tensor& w, Tensor& dx_sum);
struct ConvWeightGrads {
  Tensor dw, db;  // db undefined when with_bias is false
};
ConvWeightGrads conv2d_backward_weights(Ctx&, const Conv2dParams&, const Tensor& x, const Tensor& dy,
                                        const Shape& w_shape, bool with_bias);

struct BatchNormForward {
  Tensor y;
  BatchNormSaved saved;
};
BatchNormForward batchnorm_forward_training(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& gamma,
                                            const Tensor& beta, Tensor& running_mean, Tensor& running_var);
Tensor batchnorm_forward_inference(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& gamma,
                                   const Tensor& beta, const Tensor& running_mean, const Tensor& running_var);
// relu(batchnorm(x) + shortcut) in training mode, shortcut of x's shape and format: on the CPU one
// pass over x after the statistics (channels_last, multiples of 16 channels), batch norm then
// add_relu elsewhere, with the same bits either way.
BatchNormForward batchnorm_add_relu_forward_training(Ctx&, const BatchNormParams&, const Tensor& x,
                                                     const Tensor& gamma, const Tensor& beta, const Tensor& shortcut,
                                                     Tensor& running_mean, Tensor& running_var);
struct BatchNormGrads {
  Tensor dx, dgamma, dbeta;
};
BatchNormGrads batchnorm_backward(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& y,
                                  const Tensor& dy, const Tensor& gamma, const BatchNormSaved& saved);

// SyncBatchNorm's halves (ops_sync_batchnorm.cpp; contracts in kernels.h).
Tensor batchnorm_moments(Ctx&, const Tensor& x);  // (2C + 1)
struct MergedMoments {
  Tensor mean, var, invstd;  // (C): global mean, biased variance, 1 / sqrt(var + eps)
  Tensor count;              // (1): values per channel over every replica
};
// gathered: (R (2C + 1)) every replica's moments; updates the running statistics in place.
MergedMoments batchnorm_merge_moments(Ctx&, const BatchNormParams&, const Tensor& gathered, int64_t channels,
                                      Tensor& running_mean, Tensor& running_var);
struct BatchNormReduced {
  Tensor sums;           // (2C): [sum g, sum g xhat] of this replica, to be summed over replicas
  Tensor dgamma, dbeta;  // (C): this replica's share (its halves of sums)
};
BatchNormReduced batchnorm_backward_reduce(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& y,
                                           const Tensor& dy, const Tensor& mean, const Tensor& invstd);
Tensor batchnorm_backward_elemt(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& y, const Tensor& dy,
                                const Tensor& gamma, const Tensor& mean, const Tensor& invstd, const Tensor& sums,
                                const Tensor& count);

Tensor relu_forward(Ctx&, const Tensor& x);
Tensor relu_backward(Ctx&, const Tensor& y, const Tensor& dy);

struct MaxPoolForward {
  Tensor y, workspace;
};
MaxPoolForward max_pool2d_forward(Ctx&, const Pool2dParams&, const Tensor& x);
Tensor max_pool2d_backward(Ctx&, const Pool2dParams&, const Tensor& x, const Tensor& dy, const Tensor& workspace);
Tensor avg_pool2d_forward(Ctx&, const Pool2dParams&, const Tensor& x);
Tensor avg_pool2d_backward(Ctx&, const Pool2dParams&, const Tensor& dy, const Shape& x_shape);
// (N, C, H, W) -> (N, C, 1, 1): average pooling over the whole plane.
Tensor global_avg_pool_forward(Ctx&, const Tensor& x);
Tensor global_avg_pool_backward(Ctx&, const Tensor& dy, const Shape& x_shape);

Tensor matmul(Ctx&, const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
Tensor linear_forward(Ctx&, const Tensor& x, const Tensor& w, const Tensor& b = {});
Tensor linear_backward_data(Ctx&, const Tensor& dy, const Tensor& w);
struct LinearWeightGrads {
  Tensor dw, db;  // db undefined when with_bias is false
};
LinearWeightGrads linear_backward_weights(Ctx&, const Tensor& x, const Tensor& dy, bool with_bias);

Tensor add(Ctx&, const Tensor& a, const Tensor& b);
Tensor add_relu(Ctx&, const Tensor& a, const Tensor& b);  // relu(a + b), one pass
Tensor mul(Ctx&, const Tensor& a, const Tensor& b);
Tensor scale(Ctx&, const Tensor& x, float alpha);
void axpy(Ctx&, float alpha, const Tensor& x, Tensor& y);
void fill(Ctx&, float value, Tensor& y);
Tensor sum(Ctx&, const Tensor& x);  // shape []
// A tensor of `shape` whose every element is the one element of s, read on the device.
Tensor broadcast_scalar(Ctx&, const Tensor& s, const Shape& shape, MemoryFormat format = MemoryFormat::kContiguous);

struct SoftmaxCrossEntropyForward {
  Tensor loss, probs;  // (N), (N, K)
};
SoftmaxCrossEntropyForward softmax_cross_entropy_forward(Ctx&, const Tensor& logits, const Tensor& labels,
                                                         float label_smoothing = 0.0f);
Tensor softmax_cross_entropy_backward(Ctx&, const Tensor& probs, const Tensor& labels, float label_smoothing,
                                      const Tensor& dloss);

// stats (3) += (loss * loss_scale, top-1 correct, N) on the device (kernels.h).
void accumulate_classification_stats(Ctx&, const Tensor& loss, float loss_scale, const Tensor& logits,
                                     const Tensor& labels, Tensor& stats);

struct DropoutForward {
  Tensor y, mask;
};
DropoutForward dropout_forward(Ctx&, const Tensor& x, float p);
Tensor dropout_backward(Ctx&, const Tensor& dy, const Tensor& mask, float p);

// Optimizer updates, in place on w and the state tensors (ops_optim.cpp). Tensors are handles:
// the vectors share storage with the parameters they name.
void sgd_update(Ctx&, const SgdParams&, const std::vector<Tensor>& w, const std::vector<Tensor>& dw,
                const std::vector<Tensor>& v);
void adamw_update(Ctx&, const AdamWParams&, const std::vector<Tensor>& w, const std::vector<Tensor>& dw,
                  const std::vector<Tensor>& m, const std::vector<Tensor>& v);
// [] f32 on the context's device: the sum of squares of every element of every tensor.
Tensor squared_norm(Ctx&, const std::vector<Tensor>& x);
// sqrt of squared_norm, read back to the host.
double global_norm(Ctx&, const std::vector<Tensor>& x);
// Scales every x in place by clip_factor(squared_norm, max_norm) (optim_math.h): PyTorch's
// clip_grad_norm_ without reading the norm back to the host.
void clip_by_global_norm(Ctx&, const std::vector<Tensor>& x, const Tensor& squared_norm, double max_norm);

}  // namespace tandem::backend
