// The oneDNN engine, streams, memory descriptors and the check of oneDNN calls.
#include "engine/backend/cpu/dnnl_util.h"

#include <dnnl_debug.h>
#include <omp.h>

#include <string>

namespace tandem::backend::cpu {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine = dnnl_check("dnnl::engine(cpu, 0)", {}, [] { return dnnl::engine(dnnl::engine::kind::cpu, 0); });
  return engine;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream = dnnl_check("dnnl::stream", {}, [] { return dnnl::stream(cpu_engine()); });
  return stream;
}

void apply_thread_budget(const Ctx& ctx) {
  if (omp_get_max_threads() != ctx.num_threads()) omp_set_num_threads(ctx.num_threads());
}

void rethrow_dnnl(const char* call, std::initializer_list<const Tensor*> tensors, const dnnl::error& e) {
  std::string what;
  for (const Tensor* t : tensors) {
    if (!what.empty()) what += ", ";
    what += t->describe();
    if (t->defined() && t->rank() == 4) what += fmt::format(" {}", memory_format_name(t->format()));
  }
  throw_error(ErrorCode::kInternal, "oneDNN {} failed on ({}): status {} ({})", call, what,
              dnnl_status2str(e.status), e.what());
}

memory::dims to_dims(std::span<const int64_t> dims) { return memory::dims(dims.begin(), dims.end()); }

memory::desc activation_md(const Shape& s, MemoryFormat format) {
  auto tag = format == MemoryFormat::kChannelsLast ? memory::format_tag::nhwc : memory::format_tag::nchw;
  return memory::desc(to_dims(s.dims()), memory::data_type::f32, tag);
}

bool is_blocked16_alias(const Shape& s, MemoryFormat format) {
  return format == MemoryFormat::kChannelsLast && s.rank() == 4 && s[1] == 16;
}

memory::desc fastest_activation_md(const Shape& s, MemoryFormat format) {
  if (!is_blocked16_alias(s, format)) return activation_md(s, format);
  return memory::desc(to_dims(s.dims()), memory::data_type::f32, memory::format_tag::nChw16c);
}

memory::desc weights_md(const Shape& s, MemoryFormat format, int64_t groups) {
  bool last = format == MemoryFormat::kChannelsLast;
  if (groups == 1) {
    return memory::desc(to_dims(s.dims()), memory::data_type::f32,
                        last ? memory::format_tag::ohwi : memory::format_tag::oihw);
  }
  memory::dims dims{groups, s[0] / groups, s[1], s[2], s[3]};
  return memory::desc(dims, memory::data_type::f32, last ? memory::format_tag::gohwi : memory::format_tag::goihw);
}

memory::desc vector_md(int64_t n) { return memory::desc({n}, memory::data_type::f32, memory::format_tag::a); }

memory::desc flat_md(const Tensor& t) { return vector_md(t.numel()); }

memory make_memory(const memory::desc& md, const Tensor& t) {
  return dnnl_check("dnnl::memory", {&t}, [&] { return memory(md, cpu_engine(), t.raw_data()); });
}

Tensor allocate_buffer(Ctx& ctx, const memory::desc& md) {
  size_t bytes = md.get_size();
  if (bytes == 0) return {};
  return Tensor::empty({static_cast<int64_t>(bytes)}, DType::kU8, ctx.device());
}

Tensor add_scratchpad(Ctx& ctx, const dnnl::primitive_desc_base& pd, Args& args) {
  memory::desc md = pd.scratchpad_desc();
  Tensor buffer = allocate_buffer(ctx, md);
  if (buffer.defined()) args.insert({DNNL_ARG_SCRATCHPAD, make_memory(md, buffer)});
  return buffer;
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void execute(const char* call, std::initializer_list<const Tensor*> tensors, const dnnl::primitive& prim,
             Args& args) {
  dnnl_check(call, tensors, [&] {
    dnnl::stream& stream = thread_stream();
    prim.execute(stream, args);
    stream.wait();
  });
}

}  // namespace tandem::backend::cpu
