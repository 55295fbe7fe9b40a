// The timed kernel table of kernel_timing.h: one template wrapper per entry of backend::KernelTable.
#include "bench/support/kernel_timing.h"

#include <chrono>
#include <type_traits>
#include <utility>

#include "engine/backend/registry.h"
#include "engine/core/tensor.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<KernelStats> stats;
backend::KernelTable real_kernels;
backend::KernelTable timed_kernels;
DeviceType timed_type = DeviceType::kCpu;
int64_t tally_batch = 0;
std::function<void()> fence;

template <auto Member>
size_t slot_of = 0;

template <typename Fn>
struct Timed;
template <typename... A>
struct Timed<void (*)(A...)> {
  template <auto Member>
  static void call(A... a) {
    KernelStats& s = stats[slot_of<Member>];
    auto tally = [&s](const auto& arg) {
      if constexpr (std::is_same_v<std::decay_t<decltype(arg)>, Tensor>) {
        // Activations only: they lead with the batch; weights (K, C, R, S) stay contiguous by design.
        if (arg.defined() && arg.rank() == 4 && arg.dim(0) == tally_batch) {
          ++(arg.format() == MemoryFormat::kChannelsLast ? s.nhwc_args : s.nchw_args);
        }
      }
    };
    if (fence) fence();
    auto start = Clock::now();
    (real_kernels.*Member)(a...);
    if (fence) fence();
    s.seconds += std::chrono::duration<double>(Clock::now() - start).count();
    ++s.calls;
    (tally(a), ...);  // after the call: outputs are filled in by then
  }
};

template <auto Member>
void wrap(backend::KernelTable& table, const char* name) {
  if (!(table.*Member)) return;
  slot_of<Member> = stats.size();
  stats.push_back({.name = name});
  using Fn = std::remove_reference_t<decltype(table.*Member)>;
  table.*Member = &Timed<Fn>::template call<Member>;
}

// The one macro: it captures the entry's name for the report.
#define TANDEM_TIME_KERNEL(entry) wrap<&backend::KernelTable::entry>(timed_kernels, #entry)

}  // namespace

void install_timed_kernels(DeviceType type, int64_t batch, std::function<void()> fence_each_call) {
  stats.clear();
  timed_type = type;
  tally_batch = batch;
  fence = std::move(fence_each_call);
  real_kernels = backend::kernels_for(type);
  timed_kernels = real_kernels;
  TANDEM_TIME_KERNEL(conv2d_forward);
  TANDEM_TIME_KERNEL(conv2d_backward_data);
  TANDEM_TIME_KERNEL(conv2d_backward_data_add);
  TANDEM_TIME_KERNEL(conv2d_backward_weights);
  TANDEM_TIME_KERNEL(batchnorm_forward_training);
  TANDEM_TIME_KERNEL(batchnorm_forward_inference);
  TANDEM_TIME_KERNEL(batchnorm_add_relu_forward_training);
  TANDEM_TIME_KERNEL(batchnorm_backward);
  TANDEM_TIME_KERNEL(batchnorm_moments);
  TANDEM_TIME_KERNEL(batchnorm_merge_moments);
  TANDEM_TIME_KERNEL(batchnorm_backward_reduce);
  TANDEM_TIME_KERNEL(batchnorm_backward_elemt);
  TANDEM_TIME_KERNEL(relu_forward);
  TANDEM_TIME_KERNEL(relu_backward);
  TANDEM_TIME_KERNEL(max_pool2d_forward);
  TANDEM_TIME_KERNEL(max_pool2d_backward);
  TANDEM_TIME_KERNEL(avg_pool2d_forward);
  TANDEM_TIME_KERNEL(avg_pool2d_backward);
  TANDEM_TIME_KERNEL(matmul);
  TANDEM_TIME_KERNEL(linear_forward);
  TANDEM_TIME_KERNEL(linear_backward_data);
  TANDEM_TIME_KERNEL(linear_backward_weights);
  TANDEM_TIME_KERNEL(linear_backward_weights_add);
  TANDEM_TIME_KERNEL(add);
  TANDEM_TIME_KERNEL(add_relu);
  TANDEM_TIME_KERNEL(mul);
  TANDEM_TIME_KERNEL(scale);
  TANDEM_TIME_KERNEL(axpy);
  TANDEM_TIME_KERNEL(fill);
  TANDEM_TIME_KERNEL(sum);
  TANDEM_TIME_KERNEL(broadcast_scalar);
  TANDEM_TIME_KERNEL(softmax_cross_entropy_forward);
  TANDEM_TIME_KERNEL(softmax_cross_entropy_backward);
  TANDEM_TIME_KERNEL(softmax_cross_entropy_inplace);
  TANDEM_TIME_KERNEL(accumulate_classification_stats);
  TANDEM_TIME_KERNEL(dropout_forward);
  TANDEM_TIME_KERNEL(dropout_backward);
  TANDEM_TIME_KERNEL(arange_fill);
  TANDEM_TIME_KERNEL(random_fill);
  TANDEM_TIME_KERNEL(sgd_update);
  TANDEM_TIME_KERNEL(adamw_update);
  TANDEM_TIME_KERNEL(squared_norm);
  TANDEM_TIME_KERNEL(clip_by_global_norm);
  // The transformer's ops: layer norm, GELU (unary), the residual sums (binary), head copies,
  // products, attention (packed or on (B, H, T, D)) and embeddings; to_bf16 is each bf16 rounding.
  TANDEM_TIME_KERNEL(to_bf16);
  TANDEM_TIME_KERNEL(from_bf16);
  TANDEM_TIME_KERNEL(permute);
  TANDEM_TIME_KERNEL(expand);
  TANDEM_TIME_KERNEL(copy_window);
  TANDEM_TIME_KERNEL(binary);
  TANDEM_TIME_KERNEL(unary);
  TANDEM_TIME_KERNEL(unary_backward);
  TANDEM_TIME_KERNEL(masked_fill);
  // The selection kernels (comparisons, where, casts, gather and topk of autograd/composite.h).
  TANDEM_TIME_KERNEL(compare);
  TANDEM_TIME_KERNEL(where);
  TANDEM_TIME_KERNEL(cast);
  TANDEM_TIME_KERNEL(gather);
  TANDEM_TIME_KERNEL(gather_backward);
  TANDEM_TIME_KERNEL(topk_indices);
  TANDEM_TIME_KERNEL(reduce_axis);
  TANDEM_TIME_KERNEL(max_axis_backward);
  TANDEM_TIME_KERNEL(softmax);
  TANDEM_TIME_KERNEL(softmax_backward);
  TANDEM_TIME_KERNEL(layer_norm_forward);
  TANDEM_TIME_KERNEL(layer_norm_backward);
  TANDEM_TIME_KERNEL(batched_matmul);
  TANDEM_TIME_KERNEL(attention_forward);
  TANDEM_TIME_KERNEL(attention_backward);
  TANDEM_TIME_KERNEL(packed_attention_forward);
  TANDEM_TIME_KERNEL(packed_attention_backward);
  TANDEM_TIME_KERNEL(embedding_forward);
  TANDEM_TIME_KERNEL(embedding_backward);
  backend::register_kernels(type, &timed_kernels);
}

void set_kernel_timing(bool on) { backend::register_kernels(timed_type, on ? &timed_kernels : &real_kernels); }

std::vector<KernelStats>& kernel_stats() { return stats; }

void reset_kernel_stats() {
  for (KernelStats& s : stats) s = {.name = s.name};
}

}  // namespace tandem::bench
