// Differentiable dense and elementwise ops, and shape changes.
#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {

Variable relu(ExecutionContext& ctx, const Variable& x) {
  Tensor y = backend::relu_forward(ctx, x.value());
  Tensor saved_y = y;
  return make_op("relu", std::move(y), {x}, [&ctx, saved_y](const Tensor& dy) {
    return std::vector<Tensor>{backend::relu_backward(ctx, saved_y, dy)};
  });
}

Variable linear(ExecutionContext& ctx, const Variable& x, const Variable& w, const Variable& b) {
  Tensor bias = b.defined() ? b.value() : Tensor();
  Tensor y = backend::linear_forward(ctx, x.value(), w.value(), bias);
  std::vector<Variable> inputs{x, w};
  if (b.defined()) inputs.push_back(b);
  Tensor xv = x.value(), wv = w.value();
  bool need_dx = x.requires_grad(), with_bias = b.defined();
  return make_op("linear", std::move(y), std::move(inputs), [&ctx, xv, wv, need_dx, with_bias](const Tensor& dy) {
    std::vector<Tensor> grads;
    grads.push_back(need_dx ? backend::linear_backward_data(ctx, dy, wv) : Tensor());
    backend::LinearWeightGrads g = backend::linear_backward_weights(ctx, xv, dy, with_bias);
    grads.push_back(std::move(g.dw));
    if (with_bias) grads.push_back(std::move(g.db));
    return grads;
  });
}

Variable matmul(ExecutionContext& ctx, const Variable& a, const Variable& b) {
  Tensor av = a.value(), bv = b.value();
  Tensor c = backend::matmul(ctx, av, bv);
  bool need_da = a.requires_grad(), need_db = b.requires_grad();
  return make_op("matmul", std::move(c), {a, b}, [&ctx, av, bv, need_da, need_db](const Tensor& dc) {
    // c = a b: da = dc b^T, db = a^T dc
    return std::vector<Tensor>{need_da ? backend::matmul(ctx, dc, bv, false, true) : Tensor(),
                               need_db ? backend::matmul(ctx, av, dc, true, false) : Tensor()};
  });
}

Variable add(ExecutionContext& ctx, const Variable& a, const Variable& b) {
  Tensor y = backend::add(ctx, a.value(), b.value());
  return make_op("add", std::move(y), {a, b}, [](const Tensor& dy) { return std::vector<Tensor>{dy, dy}; });
}

Variable add_relu(ExecutionContext& ctx, const Variable& a, const Variable& b) {
  Tensor y = backend::add_relu(ctx, a.value(), b.value());
  Tensor saved_y = y;
  return make_op("add_relu", std::move(y), {a, b}, [&ctx, saved_y](const Tensor& dy) {
    Tensor dx = backend::relu_backward(ctx, saved_y, dy);
    return std::vector<Tensor>{dx, dx};
  });
}

Variable mul(ExecutionContext& ctx, const Variable& a, const Variable& b) {
  Tensor av = a.value(), bv = b.value();
  Tensor y = backend::mul(ctx, av, bv);
  return make_op("mul", std::move(y), {a, b}, [&ctx, av, bv](const Tensor& dy) {
    return std::vector<Tensor>{backend::mul(ctx, dy, bv), backend::mul(ctx, dy, av)};
  });
}

Variable scale(ExecutionContext& ctx, const Variable& x, float alpha) {
  Tensor y = backend::scale(ctx, x.value(), alpha);
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
  (void)ctx;
  Tensor contiguous = x.value().format() == MemoryFormat::kContiguous
                          ? x.value()
                          : x.value().to_format(MemoryFormat::kContiguous);
  Tensor y = contiguous.reshape(shape);
  Shape x_shape = x.shape();
  MemoryFormat format = x.value().format();
  return make_op("reshape", std::move(y), {x}, [x_shape, format](const Tensor& dy) {
    return std::vector<Tensor>{dy.reshape(x_shape).to_format(format)};
  });
}

Variable flatten(ExecutionContext& ctx, const Variable& x) {
  int64_t n = x.shape()[0];
  return reshape(ctx, x, Shape{n, n == 0 ? 0 : x.value().numel() / n});
}

}  // namespace tandem::autograd
