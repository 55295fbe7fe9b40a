// The CPU kernel table: every entry of KernelTable, filled from the cpu_*.cpp kernels.
#include "engine/backend/cpu/cpu_backend.h"

#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/cpu_optim.h"
#include "engine/backend/cpu/plan_cache.h"

namespace tandem::backend::cpu {

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    t.to_bf16 = to_bf16;
    t.from_bf16 = from_bf16;
    t.conv2d_forward = conv2d_forward;
    t.conv2d_backward_data = conv2d_backward_data;
    t.conv2d_backward_data_add = conv2d_backward_data_add;
    t.conv2d_backward_weights = conv2d_backward_weights;
    t.batchnorm_forward_training = batchnorm_forward_training;
    t.batchnorm_add_relu_forward_training = batchnorm_add_relu_forward_training;
    t.batchnorm_forward_inference = batchnorm_forward_inference;
    t.batchnorm_backward = batchnorm_backward;
    t.batchnorm_moments = batchnorm_moments;
    t.batchnorm_merge_moments = batchnorm_merge_moments;
    t.batchnorm_backward_reduce = batchnorm_backward_reduce;
    t.batchnorm_backward_elemt = batchnorm_backward_elemt;
    t.relu_forward = relu_forward;
    t.relu_backward = relu_backward;
    t.max_pool2d_forward = max_pool2d_forward;
    t.max_pool2d_backward = max_pool2d_backward;
    t.avg_pool2d_forward = avg_pool2d_forward;
    t.avg_pool2d_backward = avg_pool2d_backward;
    t.matmul = matmul;
    t.linear_forward = linear_forward;
    t.linear_backward_data = linear_backward_data;
    t.linear_backward_weights = linear_backward_weights;
    t.add = add;
    t.add_relu = add_relu;
    t.mul = mul;
    t.scale = scale;
    t.axpy = axpy;
    t.fill = fill;
    t.arange_fill = arange_fill;
    t.random_fill = random_fill;
    t.sum = sum;
    t.broadcast_scalar = broadcast_scalar;
    t.softmax_cross_entropy_forward = softmax_cross_entropy_forward;
    t.softmax_cross_entropy_backward = softmax_cross_entropy_backward;
    t.softmax_cross_entropy_inplace = softmax_cross_entropy_inplace;
    t.accumulate_classification_stats = accumulate_classification_stats;
    t.dropout_forward = dropout_forward;
    t.dropout_backward = dropout_backward;
    t.sgd_update = sgd_update;
    t.adamw_update = adamw_update;
    t.squared_norm = squared_norm;
    t.clip_by_global_norm = clip_by_global_norm;
    t.permute = permute;
    t.expand = expand;
    t.copy_window = copy_window;
    t.binary = binary;
    t.unary = unary;
    t.unary_backward = unary_backward;
    t.masked_fill = masked_fill;
    t.compare = compare;
    t.where = where;
    t.cast = cast;
    t.gather = gather;
    t.gather_backward = gather_backward;
    t.topk_indices = topk_indices;
    t.reduce_axis = reduce_axis;
    t.max_axis_backward = max_axis_backward;
    t.softmax = softmax;
    t.softmax_backward = softmax_backward;
    t.layer_norm_forward = layer_norm_forward;
    t.layer_norm_backward = layer_norm_backward;
    t.batched_matmul = batched_matmul;
    t.attention_forward = attention_forward;
    t.attention_backward = attention_backward;
    t.embedding_forward = embedding_forward;
    t.embedding_backward = embedding_backward;
    return t;
  }();
  return table;
}

int64_t primitives_created() { return plans_created(); }

}  // namespace tandem::backend::cpu
