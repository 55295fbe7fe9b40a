// The checked entry points of ops.h for convolution, batch norm, ReLU and pooling (the rest are
// in ops_dense.cpp): validate once (ops_validate.h), allocate the outputs on the context's device
// in x's memory format, call the device's kernel table.
#include "engine/backend/ops.h"

#include "engine/backend/kernels.h"

#include "engine/backend/ops_validate.h"

namespace tandem::backend {
namespace {

using namespace detail;

constexpr std::string_view kNchw = "(N, C, H, W)";
constexpr std::string_view kWeights = "(K, C/groups, R, S)";

void check_bn_params(std::string_view op, const Ctx& ctx, const Tensor& x, const Tensor& gamma) {
  check_tensor(op, "x", x, ctx, activation_dtype(ctx, x), 4, kNchw);
  check_vector(op, "gamma", gamma, ctx, x.dim(1), "channels", "x", x.shape());
}

// What a batch norm made with p writes its training y and its dx in.
DType bn_activation_dtype(const Ctx& ctx, const BatchNormParams& p) {
  return p.bf16_activations && keeps_bf16(ctx) ? DType::kBF16 : DType::kF32;
}

}  // namespace

Tensor bf16_operand(Ctx& ctx, const Tensor& x) {
  if (ctx.options().precision != Precision::kBf16 || table(ctx).to_bf16 == nullptr || x.dtype() == DType::kBF16) {
    return x;
  }
  check_tensor("bf16_operand", "x", x, ctx, DType::kF32, -1, "");
  Tensor y = Tensor::empty(x.shape(), DType::kBF16, ctx.device(), x.format());
  table(ctx).to_bf16(ctx, x, y);
  return y;
}

Tensor bf16_weight(Ctx& ctx, const Tensor& w) {
  if (ctx.options().precision != Precision::kBf16 || table(ctx).to_bf16 == nullptr || w.dtype() == DType::kBF16) {
    return w;
  }
  check_tensor("bf16_weight", "w", w, ctx, DType::kF32, -1, "");
  // A view of the storage with another shape (a reshape) sees the shadow with its own shape.
  Tensor shadow = w.bf16_shadow();
  if (shadow.defined() && (shadow.shape() != w.shape() || shadow.format() != w.format())) {
    const bool reshapeable = shadow.numel() == w.numel() && shadow.format() == MemoryFormat::kContiguous &&
                             w.format() == MemoryFormat::kContiguous;
    shadow = reshapeable ? shadow.reshape(w.shape()) : Tensor();
  }
  if (shadow.defined() && w.bf16_shadow_current()) return shadow;
  // Stale (the weight was written since): its memory is rounded into again.
  if (!shadow.defined()) shadow = Tensor::empty(w.shape(), DType::kBF16, ctx.device(), w.format());
  table(ctx).to_bf16(ctx, w, shadow);
  shadow.bump_version();
  w.set_bf16_shadow(shadow);
  return shadow;
}

namespace {

void check_conversion(std::string_view op, const Ctx& ctx, const Tensor& x, DType from, const Tensor& y, DType to) {
  check_tensor(op, "x", x, ctx, from, -1, "");
  check_tensor(op, "y", y, ctx, to, -1, "");
  check_same(op, "x", x, "y", y);
}

}  // namespace

void round_to_bf16(Ctx& ctx, const Tensor& x, Tensor& y) {
  constexpr std::string_view op = "round_to_bf16";
  check_conversion(op, ctx, x, DType::kF32, y, DType::kBF16);
  entry(table(ctx).to_bf16, op, ctx)(ctx, x, y);
}

void widen_from_bf16(Ctx& ctx, const Tensor& x, Tensor& y) {
  constexpr std::string_view op = "widen_from_bf16";
  check_conversion(op, ctx, x, DType::kBF16, y, DType::kF32);
  entry(table(ctx).from_bf16, op, ctx)(ctx, x, y);
}

Shape conv2d_output_shape(const Conv2dParams& p, const Shape& x, const Shape& w) {
  check_shape4("conv2d_output_shape", "x", x, kNchw);
  check_shape4("conv2d_output_shape", "w", w, kWeights);
  return conv_output_shape("conv2d_output_shape", p, x, "x", w, "w");
}

Shape pool2d_output_shape(const Pool2dParams& p, const Shape& x) {
  check_shape4("pool2d_output_shape", "x", x, kNchw);
  return pool_output_shape("pool2d_output_shape", p, x, "x");
}

Tensor conv2d_forward(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                      bool bf16_output) {
  constexpr std::string_view op = "conv2d_forward";
  check_tensor(op, "x", x, ctx, operand_dtype(ctx, x), 4, kNchw);
  check_tensor(op, "w", w, ctx, DType::kF32, 4, kWeights);
  Shape y_shape = conv_output_shape(op, p, x.shape(), "x", w.shape(), "w");
  if (b.defined()) check_vector(op, "b", b, ctx, w.dim(0), "filters", "w", w.shape());
  auto fn = entry(table(ctx).conv2d_forward, op, ctx);
  const bool bf16_y = bf16_output && keeps_bf16(ctx) && !b.defined();  // a bias is added to an f32 y
  Tensor y = like(ctx, y_shape, x.format(), bf16_y ? DType::kBF16 : DType::kF32);
  fn(ctx, p, x, w, b, y);
  return y;
}

namespace {

void check_backward_data(std::string_view op, Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w,
                         const Shape& x_shape) {
  check_tensor(op, "dy", dy, ctx, operand_dtype(ctx, dy), 4, "(N, K, P, Q)");
  check_tensor(op, "w", w, ctx, DType::kF32, 4, kWeights);
  check_shape4(op, "x_shape", x_shape, kNchw);
  Shape y_shape = conv_output_shape(op, p, x_shape, "x_shape", w.shape(), "w");
  TANDEM_CHECK(dy.shape() == y_shape, ErrorCode::kInvalidArgument,
               "{}: dy has shape {} but convolving x_shape {} with w {} gives {}", op, dy.shape().str(),
               x_shape.str(), w.shape().str(), y_shape.str());
}

}  // namespace

Tensor conv2d_backward_data(Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w, const Shape& x_shape) {
  constexpr std::string_view op = "conv2d_backward_data";
  check_backward_data(op, ctx, p, dy, w, x_shape);
  auto fn = entry(table(ctx).conv2d_backward_data, op, ctx);
  Tensor dx = like(ctx, x_shape, dy.format());
  fn(ctx, p, dy, w, dx);
  return dx;
}

void conv2d_backward_data_add(Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w, Tensor& dx_sum) {
  constexpr std::string_view op = "conv2d_backward_data_add";
  check_tensor(op, "dx_sum", dx_sum, ctx, DType::kF32, 4, kNchw);
  check_backward_data(op, ctx, p, dy, w, dx_sum.shape());
  if (dx_sum.format() != dy.format()) {  // rare (a model mixing layouts): a part, converted, then added
    Tensor part = conv2d_backward_data(ctx, p, dy, w, dx_sum.shape()).to_format(dx_sum.format());
    return axpy(ctx, 1.0f, part, dx_sum);
  }
  entry(table(ctx).conv2d_backward_data_add, op, ctx)(ctx, p, dy, w, dx_sum);
}

ConvWeightGrads conv2d_backward_weights(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& dy,
                                        const Shape& w_shape, bool with_bias) {
  constexpr std::string_view op = "conv2d_backward_weights";
  check_tensor(op, "x", x, ctx, operand_dtype(ctx, x), 4, kNchw);
  check_tensor(op, "dy", dy, ctx, operand_dtype(ctx, dy), 4, "(N, K, P, Q)");
  check_shape4(op, "w_shape", w_shape, kWeights);
  Shape y_shape = conv_output_shape(op, p, x.shape(), "x", w_shape, "w_shape");
  TANDEM_CHECK(dy.shape() == y_shape, ErrorCode::kInvalidArgument,
               "{}: dy has shape {} but convolving x {} with w_shape {} gives {}", op, dy.shape().str(),
               x.shape().str(), w_shape.str(), y_shape.str());
  check_same_format(op, "x", x, "dy", dy);
  auto fn = entry(table(ctx).conv2d_backward_weights, op, ctx);
  // Weights (and their gradients) are parameters: always contiguous (K, C/groups, R, S).
  ConvWeightGrads g{like(ctx, w_shape, MemoryFormat::kContiguous), Tensor()};
  if (with_bias) g.db = like(ctx, {w_shape[0]}, MemoryFormat::kContiguous);
  fn(ctx, p, x, dy, g.dw, g.db);
  return g;
}

namespace {

void check_bn_training(std::string_view op, const Ctx& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       const Tensor& running_mean, const Tensor& running_var) {
  check_bn_params(op, ctx, x, gamma);
  check_vector(op, "beta", beta, ctx, x.dim(1), "channels", "x", x.shape());
  check_vector(op, "running_mean", running_mean, ctx, x.dim(1), "channels", "x", x.shape());
  check_vector(op, "running_var", running_var, ctx, x.dim(1), "channels", "x", x.shape());
  TANDEM_CHECK(x.numel() / std::max<int64_t>(x.dim(1), 1) > 1, ErrorCode::kInvalidArgument,
               "{}: x {} has one value per channel; training needs more than one (N * H * W > 1)", op,
               x.shape().str());
}

BatchNormForward bn_outputs(Ctx& ctx, const Tensor& x, DType y_dtype) {
  BatchNormForward out;
  out.y = like(ctx, x.shape(), x.format(), y_dtype);
  out.saved.mean = like(ctx, {x.dim(1)}, MemoryFormat::kContiguous);
  out.saved.invstd = like(ctx, {x.dim(1)}, MemoryFormat::kContiguous);
  return out;
}

}  // namespace

BatchNormForward batchnorm_forward_training(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                            const Tensor& beta, Tensor& running_mean, Tensor& running_var) {
  constexpr std::string_view op = "batchnorm_forward_training";
  check_bn_training(op, ctx, x, gamma, beta, running_mean, running_var);
  auto fn = entry(table(ctx).batchnorm_forward_training, op, ctx);
  BatchNormForward out = bn_outputs(ctx, x, bn_activation_dtype(ctx, p));
  fn(ctx, p, x, gamma, beta, running_mean, running_var, out.y, out.saved);
  return out;
}

BatchNormForward batchnorm_add_relu_forward_training(Ctx& ctx, const BatchNormParams& p, const Tensor& x,
                                                     const Tensor& gamma, const Tensor& beta, const Tensor& shortcut,
                                                     Tensor& running_mean, Tensor& running_var) {
  constexpr std::string_view op = "batchnorm_add_relu_forward_training";
  check_bn_training(op, ctx, x, gamma, beta, running_mean, running_var);
  check_tensor(op, "shortcut", shortcut, ctx, activation_dtype(ctx, shortcut), 4, kNchw);
  check_same(op, "x", x, "shortcut", shortcut);
  auto fn = entry(table(ctx).batchnorm_add_relu_forward_training, op, ctx);
  BatchNormParams plain = p;
  plain.fuse_relu = false;
  BatchNormForward out = bn_outputs(ctx, x, bn_activation_dtype(ctx, p));
  fn(ctx, plain, x, gamma, beta, shortcut, running_mean, running_var, out.y, out.saved);
  return out;
}

Tensor batchnorm_forward_inference(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                                   const Tensor& beta, const Tensor& running_mean, const Tensor& running_var) {
  constexpr std::string_view op = "batchnorm_forward_inference";
  check_bn_params(op, ctx, x, gamma);
  check_vector(op, "beta", beta, ctx, x.dim(1), "channels", "x", x.shape());
  check_vector(op, "running_mean", running_mean, ctx, x.dim(1), "channels", "x", x.shape());
  check_vector(op, "running_var", running_var, ctx, x.dim(1), "channels", "x", x.shape());
  auto fn = entry(table(ctx).batchnorm_forward_inference, op, ctx);
  Tensor y = like(ctx, x.shape(), x.format());
  fn(ctx, p, widened(ctx, x), gamma, beta, running_mean, running_var, y);  // eval reads f32
  return y;
}

BatchNormGrads batchnorm_backward(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& y,
                                  const Tensor& dy, const Tensor& gamma, const BatchNormSaved& saved) {
  constexpr std::string_view op = "batchnorm_backward";
  check_bn_params(op, ctx, x, gamma);
  check_tensor(op, "y", y, ctx, activation_dtype(ctx, y), 4, kNchw);
  check_tensor(op, "dy", dy, ctx, DType::kF32, 4, kNchw);
  check_same(op, "x", x, "y", y);
  check_same(op, "x", x, "dy", dy);
  check_vector(op, "saved.mean", saved.mean, ctx, x.dim(1), "channels", "x", x.shape());
  check_vector(op, "saved.invstd", saved.invstd, ctx, x.dim(1), "channels", "x", x.shape());
  auto fn = entry(table(ctx).batchnorm_backward, op, ctx);
  BatchNormGrads g{like(ctx, x.shape(), x.format(), bn_activation_dtype(ctx, p)),
                   like(ctx, {x.dim(1)}, MemoryFormat::kContiguous),
                   like(ctx, {x.dim(1)}, MemoryFormat::kContiguous)};
  fn(ctx, p, x, y, dy, gamma, saved, g.dx, g.dgamma, g.dbeta);
  return g;
}

Tensor relu_forward(Ctx& ctx, const Tensor& x) {
  constexpr std::string_view op = "relu_forward";
  check_tensor(op, "x", x, ctx, DType::kF32, -1, "");
  auto fn = entry(table(ctx).relu_forward, op, ctx);
  Tensor y = like(ctx, x.shape(), x.format());
  fn(ctx, x, y);
  return y;
}

Tensor relu_backward(Ctx& ctx, const Tensor& y, const Tensor& dy) {
  constexpr std::string_view op = "relu_backward";
  check_tensor(op, "y", y, ctx, activation_dtype(ctx, y), -1, "");
  check_tensor(op, "dy", dy, ctx, DType::kF32, -1, "");
  check_same(op, "y", y, "dy", dy);
  auto fn = entry(table(ctx).relu_backward, op, ctx);
  Tensor dx = like(ctx, y.shape(), y.format());
  fn(ctx, y, dy, dx);
  return dx;
}

MaxPoolForward max_pool2d_forward(Ctx& ctx, const Pool2dParams& p, const Tensor& x_in) {
  constexpr std::string_view op = "max_pool2d_forward";
  check_tensor(op, "x", x_in, ctx, activation_dtype(ctx, x_in), 4, kNchw);
  const Tensor x = widened(ctx, x_in);
  Shape y_shape = pool_output_shape(op, p, x.shape(), "x");
  auto fn = entry(table(ctx).max_pool2d_forward, op, ctx);
  MaxPoolForward out{like(ctx, y_shape, x.format()), Tensor()};
  if (out.y.numel() == 0) {  // an empty batch: nothing to pool, and no library call on zero sizes
    out.workspace = Tensor::empty({0}, DType::kU8, ctx.device());
    return out;
  }
  fn(ctx, p, x, out.y, out.workspace);
  return out;
}

Tensor max_pool2d_backward(Ctx& ctx, const Pool2dParams& p, const Tensor& x_in, const Tensor& dy,
                           const Tensor& workspace) {
  constexpr std::string_view op = "max_pool2d_backward";
  check_tensor(op, "x", x_in, ctx, activation_dtype(ctx, x_in), 4, kNchw);
  const Tensor x = widened(ctx, x_in);
  check_tensor(op, "dy", dy, ctx, DType::kF32, 4, kNchw);
  check_tensor(op, "workspace", workspace, ctx, DType::kU8, -1, "(from max_pool2d_forward)");
  Shape y_shape = pool_output_shape(op, p, x.shape(), "x");
  TANDEM_CHECK(dy.shape() == y_shape, ErrorCode::kInvalidArgument,
               "{}: dy has shape {} but pooling x {} gives {}", op, dy.shape().str(), x.shape().str(), y_shape.str());
  check_same_format(op, "x", x, "dy", dy);
  auto fn = entry(table(ctx).max_pool2d_backward, op, ctx);
  Tensor dx = like(ctx, x.shape(), x.format());
  if (dx.numel() == 0) return dx;
  fn(ctx, p, x, dy, workspace, dx);
  return dx;
}

Tensor avg_pool2d_forward(Ctx& ctx, const Pool2dParams& p, const Tensor& x_in) {
  constexpr std::string_view op = "avg_pool2d_forward";
  check_tensor(op, "x", x_in, ctx, activation_dtype(ctx, x_in), 4, kNchw);
  const Tensor x = widened(ctx, x_in);
  Shape y_shape = pool_output_shape(op, p, x.shape(), "x");
  auto fn = entry(table(ctx).avg_pool2d_forward, op, ctx);
  Tensor y = like(ctx, y_shape, x.format());
  fn(ctx, p, x, y);
  return y;
}

Tensor avg_pool2d_backward(Ctx& ctx, const Pool2dParams& p, const Tensor& dy, const Shape& x_shape) {
  constexpr std::string_view op = "avg_pool2d_backward";
  check_tensor(op, "dy", dy, ctx, DType::kF32, 4, kNchw);
  check_shape4(op, "x_shape", x_shape, kNchw);
  Shape y_shape = pool_output_shape(op, p, x_shape, "x_shape");
  TANDEM_CHECK(dy.shape() == y_shape, ErrorCode::kInvalidArgument,
               "{}: dy has shape {} but pooling x_shape {} gives {}", op, dy.shape().str(), x_shape.str(),
               y_shape.str());
  auto fn = entry(table(ctx).avg_pool2d_backward, op, ctx);
  Tensor dx = like(ctx, x_shape, dy.format());
  fn(ctx, p, dy, dx);
  return dx;
}

namespace {

Pool2dParams whole_plane(const Shape& x) {
  Pool2dParams p;
  p.kernel = {x[2], x[3]};
  p.stride = {1, 1};
  p.padding = {0, 0};
  return p;
}

}  // namespace

Tensor global_avg_pool_forward(Ctx& ctx, const Tensor& x_in) {
  constexpr std::string_view op = "global_avg_pool_forward";
  check_tensor(op, "x", x_in, ctx, activation_dtype(ctx, x_in), 4, kNchw);
  const Tensor x = widened(ctx, x_in);
  TANDEM_CHECK(x.dim(2) > 0 && x.dim(3) > 0, ErrorCode::kInvalidArgument, "{}: x {} has an empty plane", op,
               x.shape().str());
  auto fn = entry(table(ctx).avg_pool2d_forward, op, ctx);
  Tensor y = like(ctx, {x.dim(0), x.dim(1), 1, 1}, x.format());
  fn(ctx, whole_plane(x.shape()), x, y);
  return y;
}

Tensor global_avg_pool_backward(Ctx& ctx, const Tensor& dy, const Shape& x_shape) {
  constexpr std::string_view op = "global_avg_pool_backward";
  check_tensor(op, "dy", dy, ctx, DType::kF32, 4, "(N, C, 1, 1)");
  check_shape4(op, "x_shape", x_shape, kNchw);
  Shape y_shape{x_shape[0], x_shape[1], 1, 1};
  TANDEM_CHECK(dy.shape() == y_shape && x_shape[2] > 0 && x_shape[3] > 0, ErrorCode::kInvalidArgument,
               "{}: dy has shape {} but x_shape {} pools to {}", op, dy.shape().str(), x_shape.str(), y_shape.str());
  auto fn = entry(table(ctx).avg_pool2d_backward, op, ctx);
  Tensor dx = like(ctx, x_shape, dy.format());
  fn(ctx, whole_plane(x_shape), dy, dx);
  return dx;
}

}  // namespace tandem::backend
