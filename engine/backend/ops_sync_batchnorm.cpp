// The checked entry points of SyncBatchNorm's halves (kernels.h): validate once, allocate the
// outputs on the context's device, call the device's kernel table.
#include <initializer_list>
#include <utility>

#include "engine/backend/ops.h"

#include "engine/backend/kernels.h"
#include "engine/backend/ops_validate.h"

namespace tandem::backend {
namespace {

using namespace detail;

constexpr std::string_view kNchw = "(N, C, H, W)";

// x, and y and dy beside it (same shape and format).
void check_activations(std::string_view op, const Ctx& ctx, const Tensor& x, const Tensor& y, const Tensor& dy) {
  check_tensor(op, "x", x, ctx, DType::kF32, 4, kNchw);
  check_tensor(op, "y", y, ctx, DType::kF32, 4, kNchw);
  check_tensor(op, "dy", dy, ctx, DType::kF32, 4, kNchw);
  check_same(op, "x", x, "y", y);
  check_same(op, "x", x, "dy", dy);
  TANDEM_CHECK(x.dim(1) > 0, ErrorCode::kInvalidArgument, "{}: x {} has no channels", op, x.shape().str());
}

void check_channel_vectors(std::string_view op, const Ctx& ctx, const Tensor& x,
                           std::initializer_list<std::pair<std::string_view, const Tensor*>> vectors) {
  for (const auto& [name, v] : vectors) check_vector(op, name, *v, ctx, x.dim(1), "channels", "x", x.shape());
}

}  // namespace

Tensor batchnorm_moments(Ctx& ctx, const Tensor& x) {
  constexpr std::string_view op = "batchnorm_moments";
  check_tensor(op, "x", x, ctx, DType::kF32, 4, kNchw);
  TANDEM_CHECK(x.dim(1) > 0, ErrorCode::kInvalidArgument, "{}: x {} has no channels", op, x.shape().str());
  auto fn = entry(table(ctx).batchnorm_moments, op, ctx);
  Tensor moments = like(ctx, {2 * x.dim(1) + 1}, MemoryFormat::kContiguous);
  fn(ctx, x, moments);
  return moments;
}

MergedMoments batchnorm_merge_moments(Ctx& ctx, const BatchNormParams& p, const Tensor& gathered, int64_t channels,
                                      Tensor& running_mean, Tensor& running_var) {
  constexpr std::string_view op = "batchnorm_merge_moments";
  check_tensor(op, "gathered", gathered, ctx, DType::kF32, -1, "(R, 2C + 1)");
  const int64_t width = 2 * channels + 1;
  TANDEM_CHECK(channels > 0 && gathered.numel() > 0 && gathered.numel() % width == 0, ErrorCode::kInvalidArgument,
               "{}: gathered has {} values, not a whole number of replicas' moments of {} channels (2C + 1 = {} each)",
               op, gathered.numel(), channels, width);
  const Shape ref({channels});
  check_vector(op, "running_mean", running_mean, ctx, channels, "channels", "the moments", ref);
  check_vector(op, "running_var", running_var, ctx, channels, "channels", "the moments", ref);
  auto fn = entry(table(ctx).batchnorm_merge_moments, op, ctx);
  MergedMoments m{like(ctx, ref, MemoryFormat::kContiguous), like(ctx, ref, MemoryFormat::kContiguous),
                  like(ctx, ref, MemoryFormat::kContiguous), like(ctx, {1}, MemoryFormat::kContiguous)};
  fn(ctx, p, gathered, running_mean, running_var, m.mean, m.var, m.invstd, m.count);
  return m;
}

BatchNormReduced batchnorm_backward_reduce(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& y,
                                           const Tensor& dy, const Tensor& mean, const Tensor& invstd) {
  constexpr std::string_view op = "batchnorm_backward_reduce";
  check_activations(op, ctx, x, y, dy);
  check_channel_vectors(op, ctx, x, {{"mean", &mean}, {"invstd", &invstd}});
  auto fn = entry(table(ctx).batchnorm_backward_reduce, op, ctx);
  BatchNormReduced r{like(ctx, {2 * x.dim(1)}, MemoryFormat::kContiguous),
                     like(ctx, {x.dim(1)}, MemoryFormat::kContiguous), like(ctx, {x.dim(1)}, MemoryFormat::kContiguous)};
  fn(ctx, p, x, y, dy, mean, invstd, r.sums, r.dgamma, r.dbeta);
  return r;
}

Tensor batchnorm_backward_elemt(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& y, const Tensor& dy,
                                const Tensor& gamma, const Tensor& mean, const Tensor& invstd, const Tensor& sums,
                                const Tensor& count) {
  constexpr std::string_view op = "batchnorm_backward_elemt";
  check_activations(op, ctx, x, y, dy);
  check_channel_vectors(op, ctx, x, {{"gamma", &gamma}, {"mean", &mean}, {"invstd", &invstd}});
  check_vector(op, "sums", sums, ctx, 2 * x.dim(1), "channels (twice)", "x", x.shape());
  check_vector(op, "count", count, ctx, 1, "count", "the merge", Shape({1}));
  auto fn = entry(table(ctx).batchnorm_backward_elemt, op, ctx);
  Tensor dx = like(ctx, x.shape(), x.format());
  fn(ctx, p, x, y, dy, gamma, mean, invstd, sums, count, dx);
  return dx;
}

}  // namespace tandem::backend
