// The optimizer entries of the CUDA kernel table: they gather every parameter's pointers into a
// cached host list and hand it to the multi-tensor launchers of cuda_optim.cu (one launch for all
// parameters, or a few for very many tensors). Arguments were validated by ops_optim.cpp.
#include <algorithm>
#include <vector>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_optim_launch.h"

namespace tandem::backend::cuda {
namespace {

using detail::MultiTensorEntry;
using tandem::cuda::CudaContext;

// The host-side list of a context, reused so a steady-state step allocates nothing.
struct OptimScratch {
  std::vector<MultiTensorEntry> entries;
};

float* mutable_f32(const Tensor& t) { return static_cast<float*>(t.raw_data()); }

std::vector<MultiTensorEntry>& entries_of(CudaContext& cc, size_t count) {
  auto& entries = cc.state<OptimScratch>().entries;
  entries.assign(count, MultiTensorEntry{{nullptr, nullptr, nullptr, nullptr}, nullptr, 0});
  return entries;
}

void* shadow_of(const Tensor* w16, size_t i) { return w16 != nullptr && w16[i].defined() ? w16[i].raw_data() : nullptr; }

size_t shadow_count(const Tensor* w16, size_t count) {
  size_t n = 0;
  for (size_t i = 0; w16 != nullptr && i < count; ++i) n += w16[i].defined() ? 1 : 0;
  return n;
}

int64_t total_elements(const Tensor* x, size_t count) {
  int64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += x[i].numel();
  return total;
}

}  // namespace

void sgd_update(Ctx& ctx, const SgdParams& p, const Tensor* w, const Tensor* dw, const Tensor* v, const Tensor* w16,
                size_t count) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const SgdStep step = sgd_step_for(p);
  auto& entries = entries_of(cc, count);
  for (size_t i = 0; i < count; ++i) {
    entries[i] = {{mutable_f32(w[i]), mutable_f32(dw[i]), step.use_momentum ? mutable_f32(v[i]) : nullptr, nullptr},
                  shadow_of(w16, i),
                  w[i].numel()};
  }
  TANDEM_CUDA_CHECK(detail::launch_sgd(step, entries.data(), count, cc.stream()),
                    "op=sgd_update tensors={} elements={} bf16_shadows={} momentum={} nesterov={} first_step={}",
                    count, total_elements(w, count), shadow_count(w16, count), p.momentum, p.nesterov, p.first_step);
}

void adamw_update(Ctx& ctx, const AdamWParams& p, const Tensor* w, const Tensor* dw, const Tensor* m, const Tensor* v,
                  const Tensor* w16, size_t count) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  auto& entries = entries_of(cc, count);
  for (size_t i = 0; i < count; ++i) {
    entries[i] = {{mutable_f32(w[i]), mutable_f32(dw[i]), mutable_f32(m[i]), mutable_f32(v[i])},
                  shadow_of(w16, i),
                  w[i].numel()};
  }
  TANDEM_CUDA_CHECK(detail::launch_adamw(adamw_step_for(p), entries.data(), count, cc.stream()),
                    "op=adamw_update tensors={} elements={} bf16_shadows={} step={}", count, total_elements(w, count),
                    shadow_count(w16, count), p.step);
}

void squared_norm(Ctx& ctx, const Tensor* x, size_t count, Tensor& y) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  auto& entries = entries_of(cc, count);
  int64_t blocks = 0;
  for (size_t i = 0; i < count; ++i) {
    entries[i] = {{mutable_f32(x[i]), nullptr, nullptr, nullptr}, nullptr, x[i].numel()};
    blocks += detail::multi_tensor_blocks(x[i].numel());
  }
  // The per-block partial sums live in the context's workspace (stream-ordered, so reusing it is safe).
  const size_t partial_bytes = static_cast<size_t>(std::max<int64_t>(blocks, 1)) * sizeof(double);
  auto* partials = static_cast<double*>(cc.workspace(partial_bytes));
  TANDEM_CUDA_CHECK(detail::launch_squared_norm(entries.data(), count, partials, y.data<float>(), cc.stream()),
                    "op=squared_norm tensors={} elements={} blocks={}", count, total_elements(x, count), blocks);
}

void clip_by_global_norm(Ctx& ctx, const Tensor* x, size_t count, const Tensor& squared_norm, double max_norm) {
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  auto& entries = entries_of(cc, count);
  for (size_t i = 0; i < count; ++i) entries[i] = {{mutable_f32(x[i]), nullptr, nullptr, nullptr}, nullptr, x[i].numel()};
  TANDEM_CUDA_CHECK(detail::launch_clip_by_global_norm(entries.data(), count, squared_norm.data<float>(), max_norm,
                                                       cc.stream()),
                    "op=clip_by_global_norm tensors={} elements={} max_norm={}", count, total_elements(x, count),
                    max_norm);
}

}  // namespace tandem::backend::cuda
