// Batch normalization: training (batch statistics, running averages updated in place with the
// unbiased variance, as PyTorch does), inference, and backward. Training and backward run on
// cpu_batchnorm_avx512's kernels where they suit (channels_last, multiples of 16 channels,
// AVX-512), on oneDNN elsewhere. Under oneDNN the ReLU that usually follows is fused when it can
// (its bit mask kept in saved.workspace); otherwise it runs as a loop and backward masks dy by y > 0.
// bf16 activations (BatchNormParams::bf16_activations): the AVX-512 kernels read and write bf16
// themselves; on oneDNN's path the kernel writes f32 and the result is rounded after. A bf16 x (a
// convolution's bf16 output) is widened to f32 at each training entry: the CPU's conv writes bf16 so
// that both backends hold the same values, while the kernels here read f32 (a copy per call).
#include <bit>
#include <cmath>

#include "engine/backend/cpu/cpu_batchnorm_avx512.h"
#include "engine/backend/cpu/cpu_bf16.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/plan_cache.h"
#include "engine/backend/cpu/parallel.h"

namespace tandem::backend::cpu {
namespace {

using dnnl::normalization_flags;
using dnnl::prop_kind;
using BnForward = dnnl::batch_normalization_forward;
using BnBackward = dnnl::batch_normalization_backward;

enum PlanOp : int64_t { kBnTraining = 1, kBnInference, kBnBackward };

const normalization_flags kAffine = normalization_flags::use_scale | normalization_flags::use_shift;

struct ForwardPlan {
  memory::desc x_md;
  BnForward::primitive_desc pd;
  BnForward prim;
  bool fused = false;  // oneDNN applies the ReLU itself
};

struct BackwardPlan {
  memory::desc x_md;
  BnBackward::primitive_desc pd;
  BnBackward prim;
};

PlanKey bn_key(PlanOp op, const Ctx& ctx, const BatchNormParams& p, const Tensor& x, bool fuse) {
  PlanKey key(op);
  key.add(x.shape().dims()).add({static_cast<int64_t>(x.format()), fuse ? 1 : 0, ctx.num_threads()});
  return key.add(static_cast<int64_t>(std::bit_cast<uint32_t>(p.eps)));
}

BnForward::primitive_desc forward_pd(prop_kind prop, const memory::desc& x_md, float eps, normalization_flags flags,
                                     bool allow_empty) {
  BnForward::desc desc(prop, x_md, eps, flags);
  return BnForward::primitive_desc(desc, user_scratchpad_attr(), cpu_engine(), allow_empty);
}

// Tries the flags with fuse_norm_relu first when asked; falls back to the unfused primitive.
ForwardPlan make_forward_plan(prop_kind prop, const Tensor& x, float eps, normalization_flags flags, bool fuse) {
  ForwardPlan f{fastest_activation_md(x.shape(), x.format()), {}, {}, false};
  if (fuse) f.pd = forward_pd(prop, f.x_md, eps, flags | normalization_flags::fuse_norm_relu, true);
  f.fused = static_cast<bool>(f.pd);
  if (!f.fused) f.pd = forward_pd(prop, f.x_md, eps, flags, false);
  f.prim = BnForward(f.pd);
  return f;
}

void relu_in_place(Tensor& y) {
  float* p = y.data<float>();
  parallel_for(y.numel(), [p](int64_t i) { p[i] = p[i] > 0.0f ? p[i] : 0.0f; });
}

// saved.invstd -> invstd, running averages, from oneDNN's biased batch variance in var.
void finish_statistics(const BatchNormParams& p, const Tensor& x, const Tensor& var, Tensor& running_mean,
                       Tensor& running_var, BatchNormSaved& saved) {
  int64_t n = x.numel() / x.dim(1);
  double unbias = static_cast<double>(n) / static_cast<double>(n - 1);
  const float* mean = saved.mean.data<float>();
  const float* v = var.data<float>();
  float* invstd = saved.invstd.data<float>();
  float* rm = running_mean.data<float>();
  float* rv = running_var.data<float>();
  float m = p.momentum;
  for (int64_t c = 0; c < x.dim(1); ++c) {
    invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v[c]) + p.eps));
    rm[c] = (1.0f - m) * rm[c] + m * mean[c];
    rv[c] = (1.0f - m) * rv[c] + m * static_cast<float>(v[c] * unbias);
  }
}

// oneDNN's backward wants the variance; we keep 1 / sqrt(var + eps), so invert it.
Tensor variance_from_invstd(Ctx& ctx, const Tensor& invstd, float eps) {
  Tensor var = Tensor::empty(invstd.shape(), DType::kF32, ctx.device());
  const float* s = invstd.data<float>();
  float* v = var.data<float>();
  for (int64_t c = 0; c < invstd.numel(); ++c) {
    double sc = s[c];
    v[c] = static_cast<float>(1.0 / (sc * sc) - eps);
  }
  return var;
}

// oneDNN's training forward into an f32 y.
void onednn_forward_training(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                             const Tensor& beta, Tensor& running_mean, Tensor& running_var, Tensor& y,
                             BatchNormSaved& saved) {
  apply_thread_budget(ctx);
  static PlanCache<ForwardPlan> cache;
  const ForwardPlan& plan = cache.get(bn_key(kBnTraining, ctx, p, x, p.fuse_relu), [&] {
    return dnnl_check("batch_normalization_forward::primitive_desc (training)", {&x}, [&] {
      return make_forward_plan(prop_kind::forward_training, x, p.eps, kAffine, p.fuse_relu);
    });
  });
  memory::desc c_md = vector_md(x.dim(1));
  Tensor var = Tensor::empty({x.dim(1)}, DType::kF32, ctx.device());
  Args args{{DNNL_ARG_SRC, make_memory(plan.x_md, x)},     {DNNL_ARG_DST, make_memory(plan.x_md, y)},
            {DNNL_ARG_SCALE, make_memory(c_md, gamma)},    {DNNL_ARG_SHIFT, make_memory(c_md, beta)},
            {DNNL_ARG_MEAN, make_memory(c_md, saved.mean)}, {DNNL_ARG_VARIANCE, make_memory(c_md, var)}};
  if (plan.fused) {
    saved.workspace = allocate_buffer(ctx, plan.pd.workspace_desc());
    args.insert({DNNL_ARG_WORKSPACE, make_memory(plan.pd.workspace_desc(), saved.workspace)});
  } else {
    saved.workspace = Tensor();
  }
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("batch_normalization_forward::execute (training)", {&x, &gamma, &beta, &y}, plan.prim, args);
  if (p.fuse_relu && !plan.fused) relu_in_place(y);
  finish_statistics(p, x, var, running_mean, running_var, saved);
}

// y itself where it is f32, else an f32 tensor of its shape for a kernel to write before
// store_result rounds it into y (bf16 activations where the AVX-512 kernel does not apply).
Tensor f32_target(Ctx& ctx, Tensor& y) {
  return y.dtype() == DType::kF32 ? y : Tensor::empty(y.shape(), DType::kF32, ctx.device(), y.format());
}

void store_result(Ctx& ctx, const Tensor& written, Tensor& y) {
  if (y.dtype() == DType::kBF16) to_bf16(ctx, written, y);
}

// oneDNN's backward into an f32 dx (below).
void onednn_backward(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const Tensor& gamma, const BatchNormSaved& saved, Tensor& dx, Tensor& dgamma, Tensor& dbeta);

}  // namespace

void batchnorm_forward_training(Ctx& ctx, const BatchNormParams& p, const Tensor& x_in, const Tensor& gamma,
                                const Tensor& beta, Tensor& running_mean, Tensor& running_var, Tensor& y,
                                BatchNormSaved& saved) {
  const Tensor x = f32_of(ctx, x_in);  // a convolution's bf16 output, widened (see the file's top)
  if (avx512_batchnorm_suits(x)) {
    avx512_batchnorm_training(ctx, p, x, gamma, beta, nullptr, running_mean, running_var, y, saved);
    return;
  }
  Tensor y32 = f32_target(ctx, y);
  onednn_forward_training(ctx, p, x, gamma, beta, running_mean, running_var, y32, saved);
  store_result(ctx, y32, y);
}

void batchnorm_add_relu_forward_training(Ctx& ctx, const BatchNormParams& p, const Tensor& x_in, const Tensor& gamma,
                                         const Tensor& beta, const Tensor& shortcut, Tensor& running_mean,
                                         Tensor& running_var, Tensor& y, BatchNormSaved& saved) {
  const Tensor x = f32_of(ctx, x_in);
  if (avx512_batchnorm_suits(x)) {
    avx512_batchnorm_training(ctx, p, x, gamma, beta, &shortcut, running_mean, running_var, y, saved);
    return;
  }
  Tensor y32 = f32_target(ctx, y);
  onednn_forward_training(ctx, p, x, gamma, beta, running_mean, running_var, y32, saved);
  add_relu(ctx, y32, f32_of(ctx, shortcut), y32);  // oneDNN's binary works in place
  store_result(ctx, y32, y);
}

void batchnorm_forward_inference(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                 const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                                 Tensor& y) {
  apply_thread_budget(ctx);
  static PlanCache<ForwardPlan> cache;
  const ForwardPlan& plan = cache.get(bn_key(kBnInference, ctx, p, x, p.fuse_relu), [&] {
    return dnnl_check("batch_normalization_forward::primitive_desc (inference)", {&x}, [&] {
      return make_forward_plan(prop_kind::forward_inference, x, p.eps,
                               kAffine | normalization_flags::use_global_stats, p.fuse_relu);
    });
  });
  memory::desc c_md = vector_md(x.dim(1));
  Args args{{DNNL_ARG_SRC, make_memory(plan.x_md, x)},
            {DNNL_ARG_DST, make_memory(plan.x_md, y)},
            {DNNL_ARG_SCALE, make_memory(c_md, gamma)},
            {DNNL_ARG_SHIFT, make_memory(c_md, beta)},
            {DNNL_ARG_MEAN, make_memory(c_md, running_mean)},
            {DNNL_ARG_VARIANCE, make_memory(c_md, running_var)}};
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("batch_normalization_forward::execute (inference)", {&x, &gamma, &beta, &y}, plan.prim, args);
  if (p.fuse_relu && !plan.fused) relu_in_place(y);
}

void batchnorm_backward(Ctx& ctx, const BatchNormParams& p, const Tensor& x_in, const Tensor& y, const Tensor& dy,
                        const Tensor& gamma, const BatchNormSaved& saved, Tensor& dx, Tensor& dgamma,
                        Tensor& dbeta) {
  const Tensor x = f32_of(ctx, x_in);
  if (avx512_batchnorm_suits(x)) {
    avx512_batchnorm_backward(ctx, p, x, dy, gamma, saved, dx, dgamma, dbeta);
    return;
  }
  Tensor dx32 = f32_target(ctx, dx);
  onednn_backward(ctx, p, x, y, dy, gamma, saved, dx32, dgamma, dbeta);
  store_result(ctx, dx32, dx);
}

namespace {

void onednn_backward(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const Tensor& gamma, const BatchNormSaved& saved, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  apply_thread_budget(ctx);
  // The forward chose: a workspace means oneDNN fused the ReLU and masks dy itself.
  bool fused = p.fuse_relu && saved.workspace.defined();
  static PlanCache<BackwardPlan> cache;
  const BackwardPlan& plan = cache.get(bn_key(kBnBackward, ctx, p, x, fused), [&] {
    return dnnl_check("batch_normalization_backward::primitive_desc", {&x, &dy}, [&] {
      normalization_flags flags = fused ? kAffine | normalization_flags::fuse_norm_relu : kAffine;
      BackwardPlan b{fastest_activation_md(x.shape(), x.format()), {}, {}};
      auto hint = forward_pd(prop_kind::forward_training, b.x_md, p.eps, flags, false);
      BnBackward::desc desc(prop_kind::backward, b.x_md, b.x_md, p.eps, flags);
      b.pd = BnBackward::primitive_desc(desc, user_scratchpad_attr(), cpu_engine(), hint);
      b.prim = BnBackward(b.pd);
      return b;
    });
  });
  Tensor dy_masked = dy;
  if (p.fuse_relu && !fused) {
    dy_masked = Tensor::empty(dy.shape(), DType::kF32, ctx.device(), dy.format());
    relu_backward(ctx, y, dy, dy_masked);
  }
  memory::desc c_md = vector_md(x.dim(1));
  Tensor var = variance_from_invstd(ctx, saved.invstd, p.eps);
  Args args{{DNNL_ARG_SRC, make_memory(plan.x_md, x)},
            {DNNL_ARG_DIFF_DST, make_memory(plan.x_md, dy_masked)},
            {DNNL_ARG_MEAN, make_memory(c_md, saved.mean)},
            {DNNL_ARG_VARIANCE, make_memory(c_md, var)},
            {DNNL_ARG_SCALE, make_memory(c_md, gamma)},
            // oneDNN 2.6 checks that a shift is passed to the backward of use_shift but never
            // reads it (the shift does not enter any gradient): gamma stands in for beta.
            {DNNL_ARG_SHIFT, make_memory(c_md, gamma)},
            {DNNL_ARG_DIFF_SRC, make_memory(plan.x_md, dx)},
            {DNNL_ARG_DIFF_SCALE, make_memory(c_md, dgamma)},
            {DNNL_ARG_DIFF_SHIFT, make_memory(c_md, dbeta)}};
  if (fused) args.insert({DNNL_ARG_WORKSPACE, make_memory(plan.pd.workspace_desc(), saved.workspace)});
  Tensor scratch = add_scratchpad(ctx, plan.pd, args);
  execute("batch_normalization_backward::execute", {&x, &dy, &gamma, &dx}, plan.prim, args);
}

}  // namespace

}  // namespace tandem::backend::cpu
