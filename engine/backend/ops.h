// The checked entry points to the kernels: each validates its arguments once (naming the op,
// the argument and both shapes on a mismatch), allocates outputs from the context's device
// allocator, and calls the kernel table of the context's device.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "engine/backend/op_params.h"

namespace tandem::backend {

// Shapes of outputs, for planning and for tests.
Shape conv2d_output_shape(const Conv2dParams& p, const Shape& x, const Shape& w);
Shape pool2d_output_shape(const Pool2dParams& p, const Shape& x);

// Under precision: bf16, where the device takes bf16 operands (KernelTable::to_bf16): x's bf16 copy,
// which the convolutions and linear layers take as x and dy, so that their three passes round each
// operand once.
// Otherwise x itself (the device rounds inside each product).
Tensor bf16_operand(Ctx&, const Tensor& x);
// bf16_operand of a weight that stays the same for many calls: its bf16 shadow (Tensor::bf16_shadow),
// rounded here only when the weight was written since (the optimizer keeps it current in its update
// kernel, so a training step rounds no weight). The same bits as bf16_operand(w).
Tensor bf16_weight(Ctx&, const Tensor& w);
// In any precision, into tensors of x's shape, format and device: y (bf16) = x (f32) rounded to
// nearest even, and y (f32) = x (bf16) widened, exactly (gradients all-reduced in bf16).
void round_to_bf16(Ctx&, const Tensor& x, Tensor& y);
void widen_from_bf16(Ctx&, const Tensor& x, Tensor& y);
// x and dy below: f32, or their bf16_operand.
// bf16_output: under precision: bf16 where the device keeps activations in bf16 (BatchNormParams::
// bf16_activations), and with no bias, y is bf16: the f32 accumulation rounded once, for a batch norm
// (training) that reads it; otherwise f32.
Tensor conv2d_forward(Ctx&, const Conv2dParams&, const Tensor& x, const Tensor& w, const Tensor& b = {},
                      bool bf16_output = false);
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
// w: f32, or its bf16_operand (a weight used by several products, rounded once for all of them).
// bf16_output: where the device keeps activations in bf16 under precision: bf16, y is bf16: x w^T
// accumulated in f32, plus b's bf16 shadow (bf16_weight: autocast rounds the bias too), rounded once.
// For a layer whose output only feeds products that round it anyway (attention's packed q, k, v).
Tensor linear_forward(Ctx&, const Tensor& x, const Tensor& w, const Tensor& b = {}, bool bf16_output = false);
Tensor linear_backward_data(Ctx&, const Tensor& dy, const Tensor& w);
struct LinearWeightGrads {
  Tensor dw, db;  // db undefined when with_bias is false
};
LinearWeightGrads linear_backward_weights(Ctx&, const Tensor& x, const Tensor& dy, bool with_bias);
// dw (out, in) f32 += dy^T x: a weight gradient summed over chunks of rows.
void linear_backward_weights_add(Ctx&, const Tensor& x, const Tensor& dy, Tensor& dw);

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
                                                         float label_smoothing = 0.0f,
                                                         int64_t ignore_index = kNoIgnoreIndex);
Tensor softmax_cross_entropy_backward(Ctx&, const Tensor& probs, const Tensor& labels, float label_smoothing,
                                      const Tensor& dloss,
                                      int64_t ignore_index = kNoIgnoreIndex);

// Both of the above in one pass over logits, which it overwrites: returns the (N) losses, and leaves
// in logits the gradient for dloss[i] = scale (0 on an ignored row). A fused classifier's chunk.
Tensor softmax_cross_entropy_inplace(Ctx&, Tensor& logits, const Tensor& labels, float label_smoothing, float scale,
                                     int64_t ignore_index = kNoIgnoreIndex);

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
// w16: empty, or per parameter an undefined tensor or its bf16 shadow to rewrite in the same pass.
void sgd_update(Ctx&, const SgdParams&, const std::vector<Tensor>& w, const std::vector<Tensor>& dw,
                const std::vector<Tensor>& v, const std::vector<Tensor>& w16 = {});
void adamw_update(Ctx&, const AdamWParams&, const std::vector<Tensor>& w, const std::vector<Tensor>& dw,
                  const std::vector<Tensor>& m, const std::vector<Tensor>& v, const std::vector<Tensor>& w16 = {});
// [] f32 on the context's device: the sum of squares of every element of every tensor.
Tensor squared_norm(Ctx&, const std::vector<Tensor>& x);
// sqrt of squared_norm, read back to the host.
double global_norm(Ctx&, const std::vector<Tensor>& x);
// Scales every x in place by clip_factor(squared_norm, max_norm) (optim_math.h): PyTorch's
// clip_grad_norm_ without reading the norm back to the host.
void clip_by_global_norm(Ctx&, const std::vector<Tensor>& x, const Tensor& squared_norm, double max_norm);

// ---- N-D tensors (ops_tensor.cpp). Dimensions may be negative (counted from the end); inputs of
// any layout, a channels_last 4-D one read as its logical (N, C, H, W); outputs contiguous. ----

// dim in [-rank, rank) as an index in [0, rank); InvalidArgument otherwise.
int normalize_dim(std::string_view op, int dim, int rank);
// NumPy's broadcast of two shapes (aligned right); InvalidArgument naming both when they do not.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
// x itself when contiguous, else a contiguous copy of its logical values.
Tensor contiguous(Ctx&, const Tensor& x);
// x in the given memory format (a device-side permute where the layouts differ).
Tensor as_format(Ctx&, const Tensor& x, MemoryFormat format);
Tensor permute(Ctx&, const Tensor& x, std::span<const int> perm);  // any dtype
Tensor transpose(Ctx&, const Tensor& x, int dim0, int dim1);
Tensor expand(Ctx&, const Tensor& x, const Shape& shape);  // broadcast to shape, any dtype
Tensor narrow(Ctx&, const Tensor& x, int dim, int64_t start, int64_t length);  // a copy of the window
// dst[..., start:start + src.dim(dim), ...] = src (dst contiguous, written in place).
void narrow_assign(Ctx&, Tensor& dst, int dim, int64_t start, const Tensor& src);
Tensor concat(Ctx&, std::span<const Tensor> xs, int dim);
Tensor binary(Ctx&, BinaryOp op, const Tensor& a, const Tensor& b);  // broadcasting
// Where the device keeps activations in bf16 (precision: bf16), x may be bf16 (linear_forward's
// bf16_output), read as its widened values, and bf16_output makes y bf16, rounded once.
Tensor unary(Ctx&, UnaryOp op, const Tensor& x, bool bf16_output = false);
// y may be undefined for GELU, whose derivative reads x alone (a GELU that kept a bf16 output); x
// may be bf16 as unary's.
Tensor unary_backward(Ctx&, UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy);
Tensor masked_fill(Ctx&, const Tensor& x, const Tensor& mask, float value);  // mask u8, broadcast to x
// torch.eq/ne/lt/le/gt/ge (ops_select.cpp): u8, 1 where a op b holds; a and b both f32 or both i64,
// broadcast. The scalar form compares with b as a value of a's dtype.
Tensor compare(Ctx&, CompareOp op, const Tensor& a, const Tensor& b);
Tensor compare(Ctx&, CompareOp op, const Tensor& a, double b);
// torch.where(cond, a, b): a where cond (u8) is not 0, else b (f32), broadcast; the other branch's
// value never reaches the result (an inf or NaN there stays out).
Tensor where(Ctx&, const Tensor& cond, const Tensor& a, const Tensor& b);
// Tensor.to(dtype) for f32, i64 and u8 x into f32 or i64 (f32 to i64 truncates toward 0; NaN,
// infinite or out of int64's range gives INT64_MIN). The same dtype returns x.
Tensor cast(Ctx&, const Tensor& x, DType dtype);
// torch.gather(x, dim, index) (f32 x; i64 index of x's rank, no larger than x but along dim) ->
// index's shape, and its backward into x's shape. On the CPU every index is checked; on CUDA an
// index outside [0, x.size(dim)) cannot be reported from the device: its output is NaN and it
// passes no gradient.
Tensor gather(Ctx&, const Tensor& x, int dim, const Tensor& index);
Tensor gather_backward(Ctx&, const Tensor& dy, int dim, const Tensor& index, const Shape& x_shape);
// The indices (i64, x's shape with k along dim) of torch.topk(x, k, dim, largest, sorted=True), in
// backend/topk_order.h's order: NaN counts as the largest, ties go to the lower index.
Tensor topk_indices(Ctx&, const Tensor& x, int64_t k, int dim, bool largest);
// Over dims (all of them when empty), keeping each as size 1 when keepdim.
Tensor reduce(Ctx&, Reduction r, const Tensor& x, std::span<const int> dims, bool keepdim);
// The shape reduce gives: x's with dims (all when empty) set to 1, or removed without keepdim.
Shape reduced_shape(std::string_view op, const Shape& x, std::span<const int> dims, bool keepdim);
// The gradient of reduce(kMax, x, dims) given dy of the keepdim (or squeezed) shape.
Tensor max_backward(Ctx&, const Tensor& x, std::span<const int> dims, const Tensor& dy);
// x summed down to shape, which x broadcasts from: the gradient of a broadcast.
Tensor sum_to(Ctx&, const Tensor& x, const Shape& shape);
Tensor softmax(Ctx&, const Tensor& x, int dim, bool log = false);
Tensor softmax_backward(Ctx&, const Tensor& y, const Tensor& dy, int dim, bool log = false);

// ---- The transformer's ops (ops_transformer.cpp). ----

struct LayerNormForward {
  Tensor y, mean, var;  // mean and var (rows): per normalised row, for the backward
};
// Normalises x over its last normalized_dims dimensions; weight and bias have their element count
// (either may be undefined). bf16_output: where the device keeps activations in bf16 (precision:
// bf16), y is bf16, the f32 result rounded once (mean and var stay f32).
LayerNormForward layer_norm_forward(Ctx&, const Tensor& x, int normalized_dims, const Tensor& weight,
                                    const Tensor& bias, float eps, bool bf16_output = false);
struct LayerNormGrads {
  Tensor dx, dweight, dbias;  // dweight undefined without weight, dbias without with_bias
};
LayerNormGrads layer_norm_backward(Ctx&, const Tensor& x, const Tensor& dy, const Tensor& weight, bool with_bias,
                                   const Tensor& mean, const Tensor& var, float eps);
// torch.matmul for matrices: (..., M, K) a (or (..., K, M) when transpose_a) and (..., K, N) b (or
// (..., N, K)), batch dimensions broadcast, -> (batch..., M, N).
Tensor matmul_nd(Ctx&, const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

struct AttentionForward {
  Tensor y, lse;  // (B, H, Tq, Dv), (B, H, Tq)
};
AttentionForward attention_forward(Ctx&, const AttentionParams& p, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& mask = {});
struct AttentionGrads {
  Tensor dq, dk, dv;
};
AttentionGrads attention_backward(Ctx&, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& mask, const Tensor& y, const Tensor& lse, const Tensor& dy);

// Self-attention on a packed projection (kernels.h: packed_attention_forward): qkv (B, T, 3 H D) ->
// y (B, T, H D) and lse (B, H, T), with the heads split and merged by the device's kernels where it
// reads qkv by strides, and by copies around attention_forward where it does not. No mask. Where the
// device keeps activations in bf16 (precision: bf16), qkv may be bf16 (linear_forward's bf16_output)
// and bf16_output makes y bf16, rounded once; y's backward then takes the bf16 y.
AttentionForward packed_attention_forward(Ctx&, const AttentionParams& p, int64_t heads, const Tensor& qkv,
                                          bool bf16_output = false);
// dqkv (B, T, 3 H D), from the forward's y and lse.
Tensor packed_attention_backward(Ctx&, const AttentionParams& p, int64_t heads, const Tensor& qkv, const Tensor& y,
                                 const Tensor& lse, const Tensor& dy);

// (V, D) weight rows by i64 id (any shape) -> (ids..., D); the backward sums rows by id.
Tensor embedding_forward(Ctx&, const Tensor& weight, const Tensor& ids);
Tensor embedding_backward(Ctx&, const Tensor& ids, const Tensor& dy, int64_t num_embeddings);

}  // namespace tandem::backend
