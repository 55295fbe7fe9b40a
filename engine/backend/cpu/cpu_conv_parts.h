// What the direct (cpu_conv.cpp) and the Winograd (cpu_conv_winograd.cpp) convolutions share:
// the geometry in oneDNN's terms, plan keys, and weights and activations moved between our
// layouts and the ones a chosen kernel wants.
#pragma once

#include <optional>
#include <utility>

#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/plan_cache.h"

namespace tandem::backend::cpu {

enum ConvPlanOp : int64_t {
  kConvForward = 1,
  kConvBackwardData,
  kConvBackwardWeights,
  kConvBackwardDataAsForward,
  kWinogradForward,
  kWinogradBackwardData,
  kWinogradBackwardWeights,
};

struct ConvGeometry {
  memory::dims strides, dilates, pad_l, pad_r;
};
ConvGeometry conv_geometry(const Conv2dParams& p);

// Weights of any layout, grouped when groups > 1: oneDNN chooses.
memory::desc any_weights_md(const Shape& w, int64_t groups);

// The forward descriptor (the plan of a forward pass, the hint of the backward ones); x_md bf16
// makes the weights bf16 too (precision: bf16), y_md stays as given.
dnnl::convolution_forward::primitive_desc forward_pd(const Conv2dParams& p, const memory::desc& x_md,
                                                     const Shape& w, const memory::desc& y_md, bool bias,
                                                     const dnnl::primitive_attr& attr);
// The two activations' descriptors (x and y, or dx and dy), each of its tensor's type (f32, or bf16
// under precision: bf16): both as nChw16c where alias is set
// and that is their very memory, else both as they lie (oneDNN has only reference kernels for
// mixed layouts).
std::pair<memory::desc, memory::desc> activation_mds(const Conv2dParams& p, const Tensor& a, const Tensor& b,
                                                     bool alias);

// The plan's key: op, activation shape and format, weight shape and format, parameters, the
// thread budget, the precision, and flag (with a bias, or adding into the result).
PlanKey conv_key(ConvPlanOp op, const Ctx& ctx, const Conv2dParams& p, const Tensor& act, const Shape& w,
                 MemoryFormat w_format, bool flag);

// A reorder from one description to another, or none where they are the same.
std::optional<dnnl::reorder> reorder_if_needed(const memory::desc& from, const memory::desc& to);
// A reorder that adds into its destination (dst += src in dst's layout).
dnnl::reorder adding_reorder(const memory::desc& from, const memory::desc& to);
// Runs r from src into dst; what names it in an error, with t.
void run_reorder(const char* what, const dnnl::reorder& r, const memory& src, const memory& dst, const Tensor& t);

// Weights as the primitive wants them: the user's memory, or a reordered copy in buffer.
memory prepared_weights(Ctx& ctx, const std::optional<dnnl::reorder>& r, const memory::desc& user_md,
                        const memory::desc& want_md, const Tensor& w, Tensor& buffer);
// The mirror for weight gradients: where the primitive writes them (dw's own memory user_dw, or a
// buffer in want_md when r must reorder them into dw afterwards: finish_weight_gradients).
memory weight_gradients_target(Ctx& ctx, const std::optional<dnnl::reorder>& r, const memory& user_dw,
                               const memory::desc& want_md, Tensor& buffer);
void finish_weight_gradients(const std::optional<dnnl::reorder>& r, const memory& written, const memory& user_dw,
                             const Tensor& dw);

}  // namespace tandem::backend::cpu
