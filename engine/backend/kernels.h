// The kernel table a device fills in. Each entry gets validated, preallocated tensors on the
// context's device (ops.h checks shapes, dtypes and devices once, then calls the entry); a null
// entry means the device does not provide the op, and ops.h reports Unimplemented(op, device).
// Layout: 4-D tensors are logical (N, C, H, W) in either memory format; outputs take x's format.
#pragma once

#include <span>

#include "engine/backend/op_params.h"

namespace tandem::backend {


struct KernelTable {
  // precision: bf16 on a device that takes bf16 operands: y = x rounded to bf16 (same shape and
  // format). With it, the convolution entries also take x (forward, backward weights) and dy (both
  // backwards) as bf16, so a convolution's operands are rounded once (ops.h: bf16_operand). Null:
  // the device rounds inside each product.
  void (*to_bf16)(Ctx&, const Tensor& x, Tensor& y) = nullptr;
  // y = x (bf16) widened to f32. Set where the device keeps activations in bf16 between ops
  // (BatchNormParams::bf16_activations): its batch norm entries then write a bf16 y (training) and
  // dx, and take a bf16 shortcut; relu_backward takes a bf16 y; the pooling ops widen a bf16 x.
  // The training batch norm entries (forward, add_relu, backward) also take a bf16 x: the output of
  // a convolution asked for bf16 (below); inference gets x widened by ops.cpp.
  void (*from_bf16)(Ctx&, const Tensor& x, Tensor& y) = nullptr;
  // (N, C, H, W) x, (K, C / groups, R, S) w, (K) b or undefined -> (N, K, P, Q) y. With from_bf16 set
  // and no bias, y may be bf16 (ops.h: conv2d_forward's bf16_output): the product's f32 accumulation
  // rounded to bf16 once, the bits an f32 y rounded to bf16 would hold.
  void (*conv2d_forward)(Ctx&, const Conv2dParams&, const Tensor& x, const Tensor& w, const Tensor& b,
                         Tensor& y) = nullptr;
  void (*conv2d_backward_data)(Ctx&, const Conv2dParams&, const Tensor& dy, const Tensor& w, Tensor& dx) = nullptr;
  // dx += the backward data, in one pass where the device can; dx has dy's memory format.
  void (*conv2d_backward_data_add)(Ctx&, const Conv2dParams&, const Tensor& dy, const Tensor& w,
                                   Tensor& dx) = nullptr;
  // db may be undefined when the convolution has no bias.
  void (*conv2d_backward_weights)(Ctx&, const Conv2dParams&, const Tensor& x, const Tensor& dy, Tensor& dw,
                                  Tensor& db) = nullptr;

  // Updates running_mean and running_var (unbiased variance) in place, as cuDNN does.
  void (*batchnorm_forward_training)(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& gamma,
                                     const Tensor& beta, Tensor& running_mean, Tensor& running_var, Tensor& y,
                                     BatchNormSaved& saved) = nullptr;
  void (*batchnorm_forward_inference)(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& gamma,
                                      const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                      Tensor& y) = nullptr;
  // y = relu(bn(x) + shortcut), a residual block's end, with the statistics and running averages of
  // batchnorm_forward_training (p.fuse_relu is false: the ReLU always follows the sum); the same bits
  // as batchnorm_forward_training then add_relu. Backward is relu_backward, then batchnorm_backward
  // without fuse_relu, with this saved state.
  void (*batchnorm_add_relu_forward_training)(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& gamma,
                                              const Tensor& beta, const Tensor& shortcut, Tensor& running_mean,
                                              Tensor& running_var, Tensor& y, BatchNormSaved& saved) = nullptr;
  // y is the forward output (needed for the fused ReLU's mask).
  void (*batchnorm_backward)(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& y, const Tensor& dy,
                             const Tensor& gamma, const BatchNormSaved& saved, Tensor& dx, Tensor& dgamma,
                             Tensor& dbeta) = nullptr;

  // SyncBatchNorm's halves (engine/autograd/sync_batchnorm_op.cpp): its statistics cross replicas
  // between them, so training batch norm is split where PyTorch splits it (batch_norm_stats,
  // batch_norm_gather_stats, batch_norm_backward_reduce, batch_norm_backward_elemt). Per-channel
  // sums are accumulated in double, in an order fixed by the shape (repeatable runs).
  // (2C + 1) moments = [mean (C), M2 (C) = sum of squared deviations, N * H * W] of x.
  void (*batchnorm_moments)(Ctx&, const Tensor& x, Tensor& moments) = nullptr;
  // gathered (R, 2C + 1): every replica's moments in rank order, merged in that order (Chan et al.)
  // into (C) mean, biased var and invstd = 1 / sqrt(var + eps), and (1) count; the running statistics
  // are updated with the unbiased variance, unless the total count is 1 or less (the caller reports it).
  void (*batchnorm_merge_moments)(Ctx&, const BatchNormParams&, const Tensor& gathered, Tensor& running_mean,
                                  Tensor& running_var, Tensor& mean, Tensor& var, Tensor& invstd,
                                  Tensor& count) = nullptr;
  // g = dy (zero where y <= 0 under fuse_relu), xhat = (x - mean) invstd. (2C) sums = [sum g,
  // sum g xhat] over this replica's values; dbeta and dgamma (C) get the same two halves.
  void (*batchnorm_backward_reduce)(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& y,
                                    const Tensor& dy, const Tensor& mean, const Tensor& invstd, Tensor& sums,
                                    Tensor& dgamma, Tensor& dbeta) = nullptr;
  // dx = gamma invstd (g - sums[c] / count - xhat sums[C + c] / count), with the global sums and count.
  void (*batchnorm_backward_elemt)(Ctx&, const BatchNormParams&, const Tensor& x, const Tensor& y, const Tensor& dy,
                                   const Tensor& gamma, const Tensor& mean, const Tensor& invstd, const Tensor& sums,
                                   const Tensor& count, Tensor& dx) = nullptr;

  void (*relu_forward)(Ctx&, const Tensor& x, Tensor& y) = nullptr;
  // dx = dy where y > 0, else 0.
  void (*relu_backward)(Ctx&, const Tensor& y, const Tensor& dy, Tensor& dx) = nullptr;

  // workspace: backend-defined (for example argmax indices), allocated by the kernel.
  void (*max_pool2d_forward)(Ctx&, const Pool2dParams&, const Tensor& x, Tensor& y, Tensor& workspace) = nullptr;
  void (*max_pool2d_backward)(Ctx&, const Pool2dParams&, const Tensor& x, const Tensor& dy,
                              const Tensor& workspace, Tensor& dx) = nullptr;
  void (*avg_pool2d_forward)(Ctx&, const Pool2dParams&, const Tensor& x, Tensor& y) = nullptr;
  void (*avg_pool2d_backward)(Ctx&, const Pool2dParams&, const Tensor& dy, Tensor& dx) = nullptr;

  // (M, K) a (or (K, M) when transpose_a), (K, N) b (or (N, K)) -> (M, N) c = a' b'
  void (*matmul)(Ctx&, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& c) = nullptr;
  // (N, in) x, (out, in) w, (out) b or undefined -> (N, out) y = x w^T + b. With to_bf16, x (forward,
  // backward weights) and dy (both backwards) may be bf16, as the convolutions' (ops.h: bf16_operand).
  // With from_bf16 set, y may be bf16 (ops.h: linear_forward's bf16_output), and b is then bf16 too:
  // the f32 sum of the products and the widened bias, rounded to nearest even once.
  void (*linear_forward)(Ctx&, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = nullptr;
  // dx = dy w
  void (*linear_backward_data)(Ctx&, const Tensor& dy, const Tensor& w, Tensor& dx) = nullptr;
  // dw = dy^T x, db = column sums of dy (db may be undefined)
  void (*linear_backward_weights)(Ctx&, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db) = nullptr;
  // dw += dy^T x, in the same GEMM (a weight gradient summed over row chunks: the fused classifier's).
  // Null: ops.h adds a linear_backward_weights result into dw.
  void (*linear_backward_weights_add)(Ctx&, const Tensor& x, const Tensor& dy, Tensor& dw) = nullptr;

  // Elementwise over equal shapes and formats (f32).
  void (*add)(Ctx&, const Tensor& a, const Tensor& b, Tensor& y) = nullptr;       // y = a + b
  // y = relu(a + b) in one pass (a residual block's end), bit for bit relu_forward(add(a, b)).
  void (*add_relu)(Ctx&, const Tensor& a, const Tensor& b, Tensor& y) = nullptr;
  void (*mul)(Ctx&, const Tensor& a, const Tensor& b, Tensor& y) = nullptr;       // y = a * b
  void (*scale)(Ctx&, const Tensor& x, float alpha, Tensor& y) = nullptr;         // y = alpha x
  void (*axpy)(Ctx&, float alpha, const Tensor& x, Tensor& y) = nullptr;          // y += alpha x
  void (*fill)(Ctx&, float value, Tensor& y) = nullptr;
  // () y = sum of all elements of x, accumulated in double on the CPU
  void (*sum)(Ctx&, const Tensor& x, Tensor& y) = nullptr;
  // y (any shape) = s for every element, s being the one element of s ([] or (1)): the backward of
  // sum, without reading s on the host.
  void (*broadcast_scalar)(Ctx&, const Tensor& s, Tensor& y) = nullptr;

  // (N, K) logits, (N) i64 labels -> (N) per-example loss, (N, K) softmax probabilities saved.
  // Target distribution: (1 - s) one-hot + s / K, with s = label_smoothing. A row whose label is
  // ignore_index has loss 0 (and gradient 0); other labels outside [0, K) are errors (CPU) or count
  // as NaN loss (CUDA, where the kernel cannot throw).
  void (*softmax_cross_entropy_forward)(Ctx&, const Tensor& logits, const Tensor& labels, float label_smoothing,
                                        int64_t ignore_index, Tensor& loss, Tensor& probs) = nullptr;
  // dlogits[i] = dloss[i] * (probs[i] - target[i]); 0 for an ignored row.
  void (*softmax_cross_entropy_backward)(Ctx&, const Tensor& probs, const Tensor& labels, float label_smoothing,
                                         int64_t ignore_index, const Tensor& dloss, Tensor& dlogits) = nullptr;
  // Both in one pass, in place (a fused classifier's chunk of rows): loss as the forward computes it,
  // and logits overwritten by the backward's gradient for dloss[i] = scale, with loss_math.h's
  // formulas (a device may order a row's sums differently from its forward kernel).
  void (*softmax_cross_entropy_inplace)(Ctx&, Tensor& logits, const Tensor& labels, float label_smoothing,
                                        int64_t ignore_index, float scale, Tensor& loss) = nullptr;

  // The training loop's running sums, kept on the device so a step reads nothing back: (3) f32 stats
  // += (loss * loss_scale, examples whose label's logit no other logit exceeds, N). loss: [] f32;
  // logits (N, K) f32; labels (N) i64. A tie counts for the label (as count_top_k with k = 1); a
  // label outside [0, K) counts as wrong.
  void (*accumulate_classification_stats)(Ctx&, const Tensor& loss, float loss_scale, const Tensor& logits,
                                          const Tensor& labels, Tensor& stats) = nullptr;

  // Inverted dropout: kept elements are scaled by 1 / (1 - p); mask is u8 of x's shape.
  void (*dropout_forward)(Ctx&, const Tensor& x, float p, Tensor& y, Tensor& mask) = nullptr;
  void (*dropout_backward)(Ctx&, const Tensor& dy, const Tensor& mask, float p, Tensor& dx) = nullptr;

  // Factories (factories.h). y[i] = start + i step, computed in double and rounded to y's type (f32,
  // bf16 through f32 to nearest even) or exactly in int64 (i64: start and step integral); step 0 is
  // torch.full. Any memory format: the flat storage is filled.
  void (*arange_fill)(Ctx&, double start, double step, Tensor& y) = nullptr;
  // y f32: uniform a + (b - a) u_i, or normal a + b sqrt(-2 ln(1 - u_2i)) cos(2 pi u_2i+1) in double,
  // u_j = philox::uniform(seed, j): the same draws on every backend (within an ulp of their libm).
  void (*random_fill)(Ctx&, const RandomFillParams&, Tensor& y) = nullptr;

  // Optimizer updates over many parameters in one call (one launch on a GPU), in place.
  // w[i], dw[i], and the state tensors [i] have equal shapes; v may be empty when momentum is 0.
  // w16: null, or count entries, each undefined or a bf16 tensor of w[i]'s shape and format that
  // receives the updated w[i] rounded to nearest even (its bf16 shadow: the bits of to_bf16).
  void (*sgd_update)(Ctx&, const SgdParams&, const Tensor* w, const Tensor* dw, const Tensor* v, const Tensor* w16,
                     size_t count) = nullptr;
  void (*adamw_update)(Ctx&, const AdamWParams&, const Tensor* w, const Tensor* dw, const Tensor* m, const Tensor* v,
                       const Tensor* w16, size_t count) = nullptr;
  // () y = sum over the tensors of the sum of their squared elements (for clipping by global norm).
  void (*squared_norm)(Ctx&, const Tensor* x, size_t count, Tensor& y) = nullptr;
  // Scales every x in place by clip_factor(squared_norm, max_norm) (optim_math.h) when the norm
  // exceeds max_norm, reading squared_norm ([] f32, from squared_norm) on the device.
  void (*clip_by_global_norm)(Ctx&, const Tensor* x, size_t count, const Tensor& squared_norm,
                              double max_norm) = nullptr;

  // ---- N-D tensors: contiguous, rank <= Shape::kMaxRank, f32 unless said (ops_tensor.cpp) ----
  // y = x.permute(perm), contiguous: y's dimension d is x's perm[d]. Any dtype.
  void (*permute)(Ctx&, const Tensor& x, std::span<const int> perm, Tensor& y) = nullptr;
  // y = x broadcast to y's shape (NumPy rules, aligned right). Any dtype.
  void (*expand)(Ctx&, const Tensor& x, Tensor& y) = nullptr;
  // Along axis, y[..., y_start + i, ...] = x[..., x_start + i, ...] for i < length; x and y agree on
  // every other dimension. Any dtype: narrow, split, concat and their gradients.
  void (*copy_window)(Ctx&, const Tensor& x, int axis, int64_t x_start, Tensor& y, int64_t y_start,
                      int64_t length) = nullptr;
  // y = a op b, both broadcast to y's shape.
  void (*binary)(Ctx&, BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) = nullptr;
  // y = f(x) elementwise (x and y may be channels_last: the layout does not matter). With from_bf16
  // set, x and y may each be bf16: x read as its widened values, y the f32 value rounded once.
  void (*unary)(Ctx&, UnaryOp op, const Tensor& x, Tensor& y) = nullptr;
  // dx = dy f'(x), with y = f(x) given too (some derivatives read it; for GELU y is any f32 tensor
  // of x's shape, unread). x may be bf16 as unary's; y, dy and dx are f32.
  void (*unary_backward)(Ctx&, UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) = nullptr;
  // y (u8) = 1 where a op b holds, else 0; a and b both f32 or both i64, broadcast to y's shape.
  void (*compare)(Ctx&, CompareOp op, const Tensor& a, const Tensor& b, Tensor& y) = nullptr;
  // y (f32) = a where cond (u8) is not 0, else b; all three broadcast to y's shape.
  void (*where)(Ctx&, const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& y) = nullptr;
  // y (f32 or i64) = x (f32, i64 or u8) converted; f32 to i64 truncates toward 0 (Tensor.long()),
  // and a NaN, infinite or out-of-range f32 gives INT64_MIN on every backend.
  void (*cast)(Ctx&, const Tensor& x, Tensor& y) = nullptr;
  // torch.gather: y (index's shape) = x at index's values (i64) along dim, at index's coordinates
  // elsewhere; x and index contiguous, of one rank. gather_backward: dx (x's shape) = the sums of dy
  // gathered from each element (backend/gather_index.h); the same bits on every backend.
  void (*gather)(Ctx&, const Tensor& x, int dim, const Tensor& index, Tensor& y) = nullptr;
  void (*gather_backward)(Ctx&, const Tensor& dy, int dim, const Tensor& index, Tensor& dx) = nullptr;
  // torch.topk's indices along the last dimension of a contiguous (rows, n) x: (rows, k) i64, in
  // backend/topk_order.h's order (largest or smallest first). k <= n.
  void (*topk_indices)(Ctx&, const Tensor& x, int64_t k, bool largest, Tensor& indices) = nullptr;
  // y = value where mask (u8, broadcast to x's shape) is not 0, else x.
  void (*masked_fill)(Ctx&, const Tensor& x, const Tensor& mask, float value, Tensor& y) = nullptr;
  // y (x's shape with axis of size 1) = the sum, mean or max over axis (sums in double on the CPU;
  // a NaN is the max).
  void (*reduce_axis)(Ctx&, Reduction r, const Tensor& x, int axis, Tensor& y) = nullptr;
  // The max's gradient over axis: dx = dy / (count of x == y along axis) where x == y, else 0.
  void (*max_axis_backward)(Ctx&, const Tensor& x, const Tensor& y, const Tensor& dy, int axis, Tensor& dx) = nullptr;
  // y = softmax(x) (log_softmax when log) along axis.
  void (*softmax)(Ctx&, const Tensor& x, int axis, bool log, Tensor& y) = nullptr;
  // From the forward's y: dx = y (dy - sum(dy y)), or for log_softmax dx = dy - exp(y) sum(dy).
  void (*softmax_backward)(Ctx&, const Tensor& y, const Tensor& dy, int axis, bool log, Tensor& dx) = nullptr;
  // (M, N) x, each row normalised: y = (x - mean) / sqrt(var + eps) * gamma + beta; gamma and beta
  // (N) may be undefined (no scale, no shift). mean and var (M): the rows' mean and biased variance.
  // With from_bf16 set, y may be bf16: the f32 result rounded once.
  void (*layer_norm_forward)(Ctx&, float eps, const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                             Tensor& mean, Tensor& var) = nullptr;
  // From the forward's mean and var; dgamma and dbeta are undefined where not wanted.
  void (*layer_norm_backward)(Ctx&, float eps, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                              const Tensor& mean, const Tensor& var, Tensor& dx, Tensor& dgamma,
                              Tensor& dbeta) = nullptr;
  // (Ba, M, K) a (or (Ba, K, M) when transpose_a), (Bb, K, N) b (or (Bb, N, K)) -> (B, M, N) c, where
  // Ba and Bb are B or 1 (a batch of 1 is used for every matrix of the other).
  void (*batched_matmul)(Ctx&, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b,
                         Tensor& c) = nullptr;
  // (B, H, Tq, D) q, (B, H, Tk, D) k, (B, H, Tk, Dv) v, mask (B or 1, H or 1, Tq, Tk) f32 added to
  // the scores or undefined -> (B, H, Tq, Dv) y and (B, H, Tq) lse, the log-sum-exp of each query's
  // scores (-inf, with y 0, for a query that sees no key). Memory-efficient: no (Tq, Tk) tensor.
  void (*attention_forward)(Ctx&, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& mask, Tensor& y, Tensor& lse) = nullptr;
  // The gradients of q, k and v (the mask gets none), recomputing the probabilities from lse.
  void (*attention_backward)(Ctx&, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& mask, const Tensor& y, const Tensor& lse, const Tensor& dy, Tensor& dq,
                             Tensor& dk, Tensor& dv) = nullptr;
  // Self-attention on the packed projection, with no head split or merge copies. qkv (B, T, 3 H D) f32
  // holds q, k and v of head h at columns [h D, (h + 1) D) of its first, second and third H D columns
  // (the output of nn.Linear(C, 3C), as nanoGPT and nn.MultiheadAttention pack them) -> y (B, T, H D),
  // the heads merged as the output projection reads them, and lse (B, H, T). No mask; Tq = Tk = T.
  // With from_bf16 set, qkv and y (forward and backward) may each be bf16: y is then rounded once
  // from the f32 result, and the backward's row term reads the bf16 y as it is.
  // ops.h calls these only where packed_attention_supported says so (null: never), and otherwise
  // splits the heads, calls attention_forward / attention_backward and merges them.
  bool (*packed_attention_supported)(Ctx&, const AttentionParams& p, int64_t head_dim) = nullptr;
  void (*packed_attention_forward)(Ctx&, const AttentionParams& p, int64_t heads, const Tensor& qkv, Tensor& y,
                                   Tensor& lse) = nullptr;
  // dqkv (B, T, 3 H D): the gradients of q, k and v in qkv's layout; every element is written.
  void (*packed_attention_backward)(Ctx&, const AttentionParams& p, int64_t heads, const Tensor& qkv,
                                    const Tensor& y, const Tensor& lse, const Tensor& dy, Tensor& dqkv) = nullptr;
  // (V, D) weight, ids (any shape, i64, in [0, V)) -> y (ids..., D): rows gathered by id.
  void (*embedding_forward)(Ctx&, const Tensor& weight, const Tensor& ids, Tensor& y) = nullptr;
  // dweight (V, D) = for each id, the sum of dy's rows at its positions, in position order (the same
  // bits every run: no floating-point atomics).
  void (*embedding_backward)(Ctx&, const Tensor& ids, const Tensor& dy, Tensor& dweight) = nullptr;
};

}  // namespace tandem::backend
