// Checked entry points of the optimizer kernels: every tensor list agrees in length, shape,
// dtype and device before one fused kernel call updates them all.
#include <cmath>
#include <string_view>

#include "engine/backend/ops.h"

#include "engine/backend/kernels.h"
#include "engine/backend/registry.h"

namespace tandem::backend {
namespace {

void check_list(std::string_view op, std::string_view name, const std::vector<Tensor>& w,
                const std::vector<Tensor>& other, Device device) {
  TANDEM_CHECK(other.size() == w.size(), ErrorCode::kInvalidArgument, "{}: {} has {} tensors but w has {}", op, name,
               other.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    TANDEM_CHECK(other[i].defined() && other[i].shape() == w[i].shape() && other[i].dtype() == DType::kF32,
                 ErrorCode::kInvalidArgument, "{}: {}[{}] is {} but w[{}] is {}", op, name, i, other[i].describe(),
                 i, w[i].describe());
    TANDEM_CHECK(other[i].device() == device && other[i].format() == w[i].format(), ErrorCode::kInvalidArgument,
                 "{}: {}[{}] is on {} ({}) but the context is on {} and w[{}] is {}", op, name, i,
                 other[i].device().str(), memory_format_name(other[i].format()), device.str(), i,
                 memory_format_name(w[i].format()));
  }
}

// Empty, or one per parameter: undefined, or a bf16 tensor of w's shape, format and device.
void check_shadows(std::string_view op, const std::vector<Tensor>& w, const std::vector<Tensor>& w16, Device device) {
  if (w16.empty()) return;
  TANDEM_CHECK(w16.size() == w.size(), ErrorCode::kInvalidArgument, "{}: w16 has {} tensors but w has {}", op,
               w16.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    if (!w16[i].defined()) continue;
    TANDEM_CHECK(w16[i].dtype() == DType::kBF16 && w16[i].shape() == w[i].shape() &&
                     w16[i].format() == w[i].format() && w16[i].device() == device,
                 ErrorCode::kInvalidArgument, "{}: w16[{}] is {} ({}) but must be the bf16 shadow of w[{}], {} ({})",
                 op, i, w16[i].describe(), memory_format_name(w16[i].format()), i, w[i].describe(),
                 memory_format_name(w[i].format()));
  }
}

template <typename Fn>
Fn entry(Fn fn, std::string_view op, Device device) {
  TANDEM_CHECK(fn != nullptr, ErrorCode::kUnimplemented, "{} is not implemented on {}", op, device.str());
  return fn;
}

}  // namespace

void sgd_update(Ctx& ctx, const SgdParams& p, const std::vector<Tensor>& w, const std::vector<Tensor>& dw,
                const std::vector<Tensor>& v, const std::vector<Tensor>& w16) {
  check_list("sgd_update", "w", w, w, ctx.device());
  check_list("sgd_update", "dw", w, dw, ctx.device());
  if (p.momentum != 0.0f) check_list("sgd_update", "momentum buffer", w, v, ctx.device());
  check_shadows("sgd_update", w, w16, ctx.device());
  auto fn = entry(kernels_for(ctx.device().type).sgd_update, "sgd_update", ctx.device());
  fn(ctx, p, w.data(), dw.data(), v.empty() ? nullptr : v.data(), w16.empty() ? nullptr : w16.data(), w.size());
}

void adamw_update(Ctx& ctx, const AdamWParams& p, const std::vector<Tensor>& w, const std::vector<Tensor>& dw,
                  const std::vector<Tensor>& m, const std::vector<Tensor>& v, const std::vector<Tensor>& w16) {
  TANDEM_CHECK(p.step >= 1, ErrorCode::kInvalidArgument, "adamw_update: step must be 1-based, got {}", p.step);
  check_list("adamw_update", "w", w, w, ctx.device());
  check_list("adamw_update", "dw", w, dw, ctx.device());
  check_list("adamw_update", "m", w, m, ctx.device());
  check_list("adamw_update", "v", w, v, ctx.device());
  check_shadows("adamw_update", w, w16, ctx.device());
  auto fn = entry(kernels_for(ctx.device().type).adamw_update, "adamw_update", ctx.device());
  fn(ctx, p, w.data(), dw.data(), m.data(), v.data(), w16.empty() ? nullptr : w16.data(), w.size());
}

Tensor squared_norm(Ctx& ctx, const std::vector<Tensor>& x) {
  check_list("squared_norm", "x", x, x, ctx.device());
  auto fn = entry(kernels_for(ctx.device().type).squared_norm, "squared_norm", ctx.device());
  Tensor y = Tensor::empty({}, DType::kF32, ctx.device());
  fn(ctx, x.data(), x.size(), y);
  return y;
}

double global_norm(Ctx& ctx, const std::vector<Tensor>& x) {
  return std::sqrt(static_cast<double>(squared_norm(ctx, x).to(Device::cpu()).data<float>()[0]));
}

void clip_by_global_norm(Ctx& ctx, const std::vector<Tensor>& x, const Tensor& squared_norm, double max_norm) {
  constexpr std::string_view op = "clip_by_global_norm";
  TANDEM_CHECK(max_norm > 0.0, ErrorCode::kInvalidArgument, "{}: max_norm must be positive, got {}", op, max_norm);
  check_list(op, "x", x, x, ctx.device());
  TANDEM_CHECK(squared_norm.defined() && squared_norm.numel() == 1 && squared_norm.dtype() == DType::kF32 &&
                   squared_norm.device() == ctx.device(),
               ErrorCode::kInvalidArgument, "{}: squared_norm must be one f32 value on {}, got {}", op,
               ctx.device().str(), squared_norm.defined() ? squared_norm.describe() : std::string("undefined"));
  auto fn = entry(kernels_for(ctx.device().type).clip_by_global_norm, op, ctx.device());
  fn(ctx, x.data(), x.size(), squared_norm, max_norm);
}

}  // namespace tandem::backend
