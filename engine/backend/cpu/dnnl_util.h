// Shared oneDNN plumbing of the CPU kernels: the engine, a stream per thread, memory
// descriptors for our tensors (either memory format, no conversion), user-managed scratchpads
// from the caching allocator, the per-replica thread budget, and the one check of oneDNN calls.
#pragma once

#include <dnnl.hpp>

#include <initializer_list>
#include <unordered_map>
#include <utility>

#include "engine/backend/kernels.h"

namespace tandem::backend::cpu {

using dnnl::memory;
using Args = std::unordered_map<int, memory>;

dnnl::engine& cpu_engine();
dnnl::stream& thread_stream();  // one per thread: replicas never share a stream

// oneDNN (built with OpenMP) and our loops use omp_get_max_threads(), a per-thread setting:
// every kernel sets it from the context first, so a replica keeps to its thread budget.
void apply_thread_budget(const Ctx& ctx);

// Rethrows a dnnl::error as tandem::Error(kInternal) naming the call, the tensors and the status.
[[noreturn]] void rethrow_dnnl(const char* call, std::initializer_list<const Tensor*> tensors,
                               const dnnl::error& e);

// Runs f, turning a oneDNN failure into a tandem::Error that says what was being done to what.
template <typename F>
decltype(auto) dnnl_check(const char* call, std::initializer_list<const Tensor*> tensors, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const dnnl::error& e) {
    rethrow_dnnl(call, tensors, e);
  }
}

memory::dims to_dims(std::span<const int64_t> dims);
// A 4-D (N, C, H, W) activation as it lies in memory: nchw or nhwc.
memory::desc activation_md(const Shape& shape, MemoryFormat format);
// With exactly 16 channels, nhwc and oneDNN's blocked nChw16c are the same bytes, and oneDNN's
// kernels for the blocked layout are the faster ones there (a 16-channel convolution's backward
// data 2.7x, batch norm 1.3x, on AVX-512): the same memory described as nChw16c.
bool is_blocked16_alias(const Shape& shape, MemoryFormat format);
// The activation as nChw16c where that is the same bytes, else as it lies (activation_md).
memory::desc fastest_activation_md(const Shape& shape, MemoryFormat format);
// (K, C / groups, R, S) weights, as oihw (or ohwi when channels_last), grouped when groups > 1.
memory::desc weights_md(const Shape& shape, MemoryFormat format, int64_t groups);
// A 1-D f32 vector of n elements (bias, batch-norm parameters and statistics).
memory::desc vector_md(int64_t n);
// The whole tensor as a flat f32 vector (elementwise primitives ignore layout).
memory::desc flat_md(const Tensor& t);

// A oneDNN view of t's storage (no copy).
memory make_memory(const memory::desc& md, const Tensor& t);
// A u8 buffer of md's size from the context's caching allocator (undefined when md is empty).
Tensor allocate_buffer(Ctx& ctx, const memory::desc& md);

// Adds the user scratchpad to args (primitives are made with scratchpad_mode::user so that
// their temporary memory also comes from the caching allocator); returns the buffer to keep alive.
Tensor add_scratchpad(Ctx& ctx, const dnnl::primitive_desc_base& pd, Args& args);
dnnl::primitive_attr user_scratchpad_attr();

// Executes prim on this thread's stream and waits for it.
void execute(const char* call, std::initializer_list<const Tensor*> tensors, const dnnl::primitive& prim,
             Args& args);

}  // namespace tandem::backend::cpu
