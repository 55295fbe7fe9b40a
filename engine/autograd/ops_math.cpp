// Differentiable ReLU, scaling, the full sum and shape changes (reshape, flatten).
#include <fmt/ranges.h>

#include <vector>

#include "engine/autograd/ops.h"
#include "engine/autograd/trace.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {

Variable relu(ExecutionContext& ctx, const Variable& x) {
  Tensor y = backend::relu_forward(ctx, x.value());
  Tensor saved_y = y;
  return make_op("relu", std::move(y), {x}, [&ctx, saved_y](const Tensor& dy) {
    return std::vector<Tensor>{backend::relu_backward(ctx, saved_y, dy)};
  });
}

Variable add_relu(ExecutionContext& ctx, const Variable& a, const Variable& b) {
  Tensor y = backend::add_relu(ctx, a.value(), b.value());
  Tensor saved_y = y;
  return make_op("add_relu", std::move(y), {a, b}, [&ctx, saved_y](const Tensor& dy) {
    Tensor dx = backend::relu_backward(ctx, saved_y, dy);
    return std::vector<Tensor>{dx, dx};
  });
}

Variable scale(ExecutionContext& ctx, const Variable& x, float alpha) {
  Tensor y = backend::scale(ctx, x.value(), alpha);
  if (tracing()) trace_attributes("scale", {{"alpha", double{alpha}}});
  return make_op("scale", std::move(y), {x}, [&ctx, alpha](const Tensor& dy) {
    return std::vector<Tensor>{backend::scale(ctx, dy, alpha)};
  });
}

Variable sum(ExecutionContext& ctx, const Variable& x) {
  Tensor y = backend::sum(ctx, x.value());
  Shape x_shape = x.shape();
  MemoryFormat format = x.value().format();
  return make_op("sum", std::move(y), {x}, [&ctx, x_shape, format](const Tensor& dy) {
    // d(sum)/dx = 1 everywhere, times the incoming scalar gradient (read on the device).
    return std::vector<Tensor>{backend::broadcast_scalar(ctx, dy, x_shape, format)};
  });
}

Variable reshape(ExecutionContext& ctx, const Variable& x, const Shape& shape) {
  // A channels_last input is laid out contiguously first, on its device (a permute).
  Tensor y = backend::contiguous(ctx, x.value()).reshape(shape);
  Shape x_shape = x.shape();
  MemoryFormat format = x.value().format();
  return make_op("reshape", std::move(y), {x}, [&ctx, x_shape, format](const Tensor& dy) {
    return std::vector<Tensor>{backend::as_format(ctx, backend::contiguous(ctx, dy).reshape(x_shape), format)};
  });
}

Shape infer_reshape(std::span<const int64_t> sizes, int64_t numel) {
  int inferred = -1;
  int64_t known = 1;
  bool valid = true;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1 && inferred < 0) {
      inferred = static_cast<int>(i);
    } else if (sizes[i] < 0) {
      valid = false;  // a second -1, or another negative size
    } else {
      known *= sizes[i];
    }
  }
  // As PyTorch: -1 cannot stand beside a 0 (any count would fit), and the counts must match.
  valid = valid && (inferred < 0 ? known == numel : known != 0 && numel % known == 0);
  TANDEM_CHECK(valid, ErrorCode::kInvalidArgument,
               "reshape: shape '[{}]' is invalid for input of size {} (at most one -1, other sizes not negative, "
               "and their product must divide the size)",
               fmt::join(sizes, ", "), numel);
  std::vector<int64_t> dims(sizes.begin(), sizes.end());
  if (inferred >= 0) dims[static_cast<size_t>(inferred)] = numel / known;
  return Shape(std::span<const int64_t>(dims));
}

Variable reshape(ExecutionContext& ctx, const Variable& x, std::span<const int64_t> sizes) {
  return reshape(ctx, x, infer_reshape(sizes, x.value().numel()));
}

Variable reshape(ExecutionContext& ctx, const Variable& x, std::initializer_list<int64_t> sizes) {
  return reshape(ctx, x, std::span<const int64_t>(sizes.begin(), sizes.size()));
}

Variable flatten(ExecutionContext& ctx, const Variable& x) {
  int64_t n = x.shape()[0];
  return reshape(ctx, x, Shape{n, n == 0 ? 0 : x.value().numel() / n});
}

}  // namespace tandem::autograd
