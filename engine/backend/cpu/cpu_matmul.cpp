// Matrix products through oneDNN's matmul: the transposes are expressed as strides of the
// memory descriptors, so no operand is ever copied (under precision: bf16, a and b are read from
// bf16 copies in the same layout, and c stays f32). Linear layers are matmuls with a bias; a linear
// layer asked for a bf16 output computes it in f32 and rounds it once.

#include "engine/backend/cpu/cpu_bf16.h"
#include "engine/backend/cpu/cpu_column_sums.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/plan_cache.h"

namespace tandem::backend::cpu {
namespace {

// The operand as the product reads it: t itself, or its bf16 form (t when it is bf16 already, else
// its bf16 copy, kept alive in copy).
memory operand(Ctx& ctx, const memory::desc& md, const Tensor& t, Tensor& copy) {
  if (md.data.data_type != dnnl_bf16) return make_memory(md, t);
  copy = bf16_of(ctx, t);
  return make_memory(md, copy);
}

memory::desc typed(const memory::desc& md, bool bf16) { return bf16 ? as_bf16(md) : md; }

struct MatmulPlan {
  memory::desc a_md, b_md, bias_md, c_md;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

// The logical (rows, cols) matrix of a 2-D tensor that is stored transposed when transposed.
memory::desc matrix_md(const Tensor& t, bool transposed) {
  int64_t rows = transposed ? t.dim(1) : t.dim(0);
  int64_t cols = transposed ? t.dim(0) : t.dim(1);
  memory::dims strides = transposed ? memory::dims{1, rows} : memory::dims{cols, 1};
  return memory::desc({rows, cols}, memory::data_type::f32, strides);
}

// c = a' b' (+ bias broadcast over rows).
void run_matmul(Ctx& ctx, const Tensor& a, const Tensor& b, bool ta, bool tb, const Tensor& bias, Tensor& c) {
  apply_thread_budget(ctx);
  static PlanCache<MatmulPlan> cache;
  PlanKey key(1);
  key.add(a.shape().dims()).add(b.shape().dims()).add({ta ? 1 : 0, tb ? 1 : 0, bias.defined() ? 1 : 0});
  const bool bf16 = computes_in_bf16(ctx);
  key.add({ctx.num_threads(), bf16 ? 1 : 0});
  const MatmulPlan& plan = cache.get(key, [&] {
    return dnnl_check("matmul::primitive_desc", {&a, &b, &bias, &c}, [&] {
      MatmulPlan m{typed(matrix_md(a, ta), bf16), typed(matrix_md(b, tb), bf16), {}, matrix_md(c, false), {}, {}};
      if (bias.defined()) {
        m.bias_md = memory::desc({1, c.dim(1)}, memory::data_type::f32, memory::format_tag::ab);
        m.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(m.a_md, m.b_md, m.bias_md, m.c_md),
                                            user_scratchpad_attr(), cpu_engine());
      } else {
        m.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(m.a_md, m.b_md, m.c_md), user_scratchpad_attr(),
                                            cpu_engine());
      }
      m.prim = dnnl::matmul(m.pd);
      return m;
    });
  });
  Tensor a16, b16;
  Args args{{DNNL_ARG_SRC, operand(ctx, plan.a_md, a, a16)},
            {DNNL_ARG_WEIGHTS, operand(ctx, plan.b_md, b, b16)},
            {DNNL_ARG_DST, make_memory(plan.c_md, c)}};
  if (bias.defined()) args.insert({DNNL_ARG_BIAS, make_memory(plan.bias_md, bias)});
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("matmul::execute", {&a, &b, &bias, &c}, plan.prim, args);
}

struct BatchedPlan {
  memory::desc a_md, b_md, c_md;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

// The logical (batch, rows, cols) matrices of a 3-D tensor stored transposed when transposed;
// a batch of 1 broadcasts over the other operand's batch (oneDNN's matmul broadcasts it).
memory::desc batched_md(const Tensor& t, bool transposed) {
  const int64_t batch = t.dim(0);
  const int64_t rows = transposed ? t.dim(2) : t.dim(1), cols = transposed ? t.dim(1) : t.dim(2);
  const int64_t matrix = rows * cols;
  memory::dims strides = transposed ? memory::dims{matrix, 1, rows} : memory::dims{matrix, cols, 1};
  return memory::desc({batch, rows, cols}, memory::data_type::f32, strides);
}

}  // namespace

void batched_matmul(Ctx& ctx, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& c) {
  apply_thread_budget(ctx);
  if (c.numel() == 0) return;
  static PlanCache<BatchedPlan> cache;
  PlanKey key(2);
  const bool bf16 = computes_in_bf16(ctx);
  key.add(a.shape().dims()).add(b.shape().dims());
  key.add({transpose_a ? 1 : 0, transpose_b ? 1 : 0, ctx.num_threads(), bf16 ? 1 : 0});
  const BatchedPlan& plan = cache.get(key, [&] {
    return dnnl_check("matmul::primitive_desc (batched)", {&a, &b, &c}, [&] {
      BatchedPlan m{typed(batched_md(a, transpose_a), bf16), typed(batched_md(b, transpose_b), bf16),
                    batched_md(c, false), {}, {}};
      m.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(m.a_md, m.b_md, m.c_md), user_scratchpad_attr(),
                                          cpu_engine());
      m.prim = dnnl::matmul(m.pd);
      return m;
    });
  });
  Tensor a16, b16;
  Args args{{DNNL_ARG_SRC, operand(ctx, plan.a_md, a, a16)},
            {DNNL_ARG_WEIGHTS, operand(ctx, plan.b_md, b, b16)},
            {DNNL_ARG_DST, make_memory(plan.c_md, c)}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("matmul::execute (batched)", {&a, &b, &c}, plan.prim, args);
}

void matmul(Ctx& ctx, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, Tensor& c) {
  run_matmul(ctx, a, b, transpose_a, transpose_b, Tensor(), c);
}

void linear_forward(Ctx& ctx, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  if (y.dtype() == DType::kBF16) {  // bf16 output (and bias): the f32 result, rounded once, as cuBLASLt's
    Tensor y32 = Tensor::empty(y.shape(), DType::kF32, ctx.device());
    run_matmul(ctx, x, w, false, true, b.defined() ? f32_of(ctx, b) : b, y32);
    to_bf16(ctx, y32, y);
    return;
  }
  run_matmul(ctx, x, w, false, true, b, y);  // (N, in) (in, out) + (1, out)
}

void linear_backward_data(Ctx& ctx, const Tensor& dy, const Tensor& w, Tensor& dx) {
  run_matmul(ctx, dy, w, false, false, Tensor(), dx);  // (N, out) (out, in)
}

void linear_backward_weights(Ctx& ctx, const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db) {
  run_matmul(ctx, dy, x, true, false, Tensor(), dw);  // (out, N) (N, in)
  if (!db.defined()) return;
  // Column sums of dy (f32, or a bf16 operand: a linear layer's or a convolution's as a matmul).
  if (dy.dtype() == DType::kBF16) {
    column_sums(ctx, static_cast<const uint16_t*>(dy.raw_data()), dy.dim(0), dy.dim(1), db.data<float>());
  } else {
    column_sums(ctx, dy.data<float>(), dy.dim(0), dy.dim(1), db.data<float>());
  }
}

}  // namespace tandem::backend::cpu
