// The CPU kernels that cpu_backend.cpp puts in the KernelTable. Arguments are already
// validated by ops.cpp (shapes, dtypes, devices, formats); see kernels.h for the contracts.
#pragma once

#include "engine/backend/kernels.h"

namespace tandem::backend::cpu {

// cpu_bf16.cpp: y = x rounded to bf16 (precision: bf16), and y = x (bf16) widened to f32
void to_bf16(Ctx&, const Tensor& x, Tensor& y);
void from_bf16(Ctx&, const Tensor& x, Tensor& y);

// cpu_conv.cpp (x and dy f32, or bf16 under precision: bf16)
void conv2d_forward(Ctx&, const Conv2dParams&, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
void conv2d_backward_data(Ctx&, const Conv2dParams&, const Tensor& dy, const Tensor& w, Tensor& dx);
void conv2d_backward_data_add(Ctx&, const Conv2dParams&, const Tensor& dy, const Tensor& w, Tensor& dx);
void conv2d_backward_weights(Ctx&, const Conv2dParams&, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db);

// cpu_batchnorm.cpp
void batchnorm_forward_training(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& gamma,
                                const Tensor& beta, Tensor& running_mean, Tensor& running_var, Tensor& y,
                                BatchNormSaved& saved);
void batchnorm_add_relu_forward_training(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& gamma,
                                         const Tensor& beta, const Tensor& shortcut, Tensor& running_mean,
                                         Tensor& running_var, Tensor& y, BatchNormSaved& saved);
void batchnorm_forward_inference(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& gamma,
                                 const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                 Tensor& y);
// (y, dx and the shortcut in bf16 under BatchNormParams::bf16_activations)
void batchnorm_backward(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& y, const Tensor& dy,
                        const Tensor& gamma, const BatchNormSaved& saved, Tensor& dx, Tensor& dgamma,
                        Tensor& dbeta);

// cpu_sync_batchnorm.cpp
void batchnorm_moments(Ctx&, const Tensor& x, Tensor& moments);
void batchnorm_merge_moments(Ctx&, const BatchNormParams&, const Tensor& gathered, Tensor& running_mean,
                             Tensor& running_var, Tensor& mean, Tensor& var, Tensor& invstd, Tensor& count);
void batchnorm_backward_reduce(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& y, const Tensor& dy,
                               const Tensor& mean, const Tensor& invstd, Tensor& sums, Tensor& dgamma, Tensor& dbeta);
void batchnorm_backward_elemt(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& gamma, const Tensor& mean, const Tensor& invstd, const Tensor& sums,
                              const Tensor& count, Tensor& dx);

// cpu_pool.cpp
void max_pool2d_forward(Ctx&, const Pool2dParams&, const Tensor& x, Tensor& y, Tensor& workspace);
void max_pool2d_backward(Ctx&, const Pool2dParams&, const Tensor& x, const Tensor& dy, const Tensor& workspace,
                         Tensor& dx);
void avg_pool2d_forward(Ctx&, const Pool2dParams&, const Tensor& x, Tensor& y);
void avg_pool2d_backward(Ctx&, const Pool2dParams&, const Tensor& dy, Tensor& dx);

// cpu_matmul.cpp
void matmul(Ctx&, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& c);
void linear_forward(Ctx&, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
void linear_backward_data(Ctx&, const Tensor& dy, const Tensor& w, Tensor& dx);
void linear_backward_weights(Ctx&, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db);

// cpu_elementwise.cpp
void relu_forward(Ctx&, const Tensor& x, Tensor& y);
void relu_backward(Ctx&, const Tensor& y, const Tensor& dy, Tensor& dx);
void add(Ctx&, const Tensor& a, const Tensor& b, Tensor& y);
void add_relu(Ctx&, const Tensor& a, const Tensor& b, Tensor& y);
void mul(Ctx&, const Tensor& a, const Tensor& b, Tensor& y);
void scale(Ctx&, const Tensor& x, float alpha, Tensor& y);
void axpy(Ctx&, float alpha, const Tensor& x, Tensor& y);
void fill(Ctx&, float value, Tensor& y);
void sum(Ctx&, const Tensor& x, Tensor& y);
void broadcast_scalar(Ctx&, const Tensor& s, Tensor& y);

// cpu_factories.cpp
void arange_fill(Ctx&, double start, double step, Tensor& y);
void random_fill(Ctx&, const RandomFillParams&, Tensor& y);

// cpu_loss.cpp
void softmax_cross_entropy_forward(Ctx&, const Tensor& logits, const Tensor& labels, float label_smoothing,
                                   int64_t ignore_index, Tensor& loss, Tensor& probs);
void softmax_cross_entropy_backward(Ctx&, const Tensor& probs, const Tensor& labels, float label_smoothing,
                                    int64_t ignore_index, const Tensor& dloss, Tensor& dlogits);
void softmax_cross_entropy_inplace(Ctx&, Tensor& logits, const Tensor& labels, float label_smoothing,
                                   int64_t ignore_index, float scale, Tensor& loss);
void accumulate_classification_stats(Ctx&, const Tensor& loss, float loss_scale, const Tensor& logits,
                                     const Tensor& labels, Tensor& stats);
void dropout_forward(Ctx&, const Tensor& x, float p, Tensor& y, Tensor& mask);
void dropout_backward(Ctx&, const Tensor& dy, const Tensor& mask, float p, Tensor& dx);

// cpu_shape.cpp
void permute(Ctx&, const Tensor& x, std::span<const int> perm, Tensor& y);
void expand(Ctx&, const Tensor& x, Tensor& y);
void copy_window(Ctx&, const Tensor& x, int axis, int64_t x_start, Tensor& y, int64_t y_start, int64_t length);

// cpu_pointwise.cpp
void binary(Ctx&, BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y);
void unary(Ctx&, UnaryOp op, const Tensor& x, Tensor& y);
void unary_backward(Ctx&, UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx);
void masked_fill(Ctx&, const Tensor& x, const Tensor& mask, float value, Tensor& y);
void compare(Ctx&, CompareOp op, const Tensor& a, const Tensor& b, Tensor& y);
void where(Ctx&, const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& y);
void cast(Ctx&, const Tensor& x, Tensor& y);
void gather(Ctx&, const Tensor& x, int dim, const Tensor& index, Tensor& y);
void gather_backward(Ctx&, const Tensor& dy, int dim, const Tensor& index, Tensor& dx);
void topk_indices(Ctx&, const Tensor& x, int64_t k, bool largest, Tensor& indices);

// cpu_reduce.cpp
void reduce_axis(Ctx&, Reduction r, const Tensor& x, int axis, Tensor& y);
void max_axis_backward(Ctx&, const Tensor& x, const Tensor& y, const Tensor& dy, int axis, Tensor& dx);
void softmax(Ctx&, const Tensor& x, int axis, bool log, Tensor& y);
void softmax_backward(Ctx&, const Tensor& y, const Tensor& dy, int axis, bool log, Tensor& dx);

// cpu_layer_norm.cpp
void layer_norm_forward(Ctx&, float eps, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                        Tensor& mean, Tensor& var);
void layer_norm_backward(Ctx&, float eps, const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                         const Tensor& var, Tensor& dx, Tensor& dgamma, Tensor& dbeta);

// cpu_matmul.cpp (batched)
void batched_matmul(Ctx&, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& c);

// cpu_attention.cpp
void attention_forward(Ctx&, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& mask, Tensor& y, Tensor& lse);
void attention_backward(Ctx&, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& mask, const Tensor& y, const Tensor& lse, const Tensor& dy, Tensor& dq,
                        Tensor& dk, Tensor& dv);

// cpu_embedding.cpp
void embedding_forward(Ctx&, const Tensor& weight, const Tensor& ids, Tensor& y);
void embedding_backward(Ctx&, const Tensor& ids, const Tensor& dy, Tensor& dweight);

}  // namespace tandem::backend::cpu
