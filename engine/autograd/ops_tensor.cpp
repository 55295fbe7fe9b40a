// Differentiable N-D ops with PyTorch's semantics: permute, narrow, split, chunk, concat,
// broadcasting add, sub, mul and div, the unary functions, masked_fill, sums, means and maxima over
// dimensions, softmax and log_softmax. Each backward is the matching backend op (a broadcast's
// gradient is summed back to its input's shape).
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/autograd/trace.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

using backend::BinaryOp;
using backend::Reduction;
using backend::UnaryOp;

// A gradient needed only when its input asks for one.
Tensor if_needed(const Variable& v, Tensor grad) { return v.requires_grad() ? std::move(grad) : Tensor(); }

std::vector<int> inverse(std::span<const int> perm, int rank) {
  std::vector<int> inv(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    inv[static_cast<size_t>(backend::normalize_dim("permute", perm[static_cast<size_t>(d)], rank))] = d;
  }
  return inv;
}

Variable unary_op(ExecutionContext& ctx, const char* name, UnaryOp op, const Variable& x) {
  Tensor xv = x.value();
  Tensor y = backend::unary(ctx, op, xv);
  Tensor yv = y;
  return make_op(name, std::move(y), {x}, [&ctx, op, xv, yv](const Tensor& dy) {
    return std::vector<Tensor>{backend::unary_backward(ctx, op, xv, yv, dy)};
  });
}

// The reduced dimensions, normalized (all of them when none are given), and keepdim.
void trace_reduction(const char* op, const Variable& x, std::span<const int> dims, bool keepdim) {
  if (!tracing()) return;
  const int rank = x.value().rank();
  std::vector<int64_t> axes;
  for (int d : dims) axes.push_back(backend::normalize_dim(op, d, rank));
  if (dims.empty()) {
    for (int d = 0; d < rank; ++d) axes.push_back(d);
  }
  trace_attributes(op, {{"axes", axes}, {"keepdim", int64_t{keepdim}}});
}

}  // namespace

Variable permute(ExecutionContext& ctx, const Variable& x, std::span<const int> dims) {
  Tensor y = backend::permute(ctx, x.value(), dims);
  std::vector<int> inv = inverse(dims, x.value().rank());
  if (tracing()) trace_attributes("permute", {{"perm", std::vector<int64_t>(dims.begin(), dims.end())}});
  return make_op("permute", std::move(y), {x}, [&ctx, inv](const Tensor& dy) {
    return std::vector<Tensor>{backend::permute(ctx, dy, inv)};
  });
}

Variable transpose(ExecutionContext& ctx, const Variable& x, int dim0, int dim1) {
  const int rank = x.value().rank();
  std::vector<int> perm(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) perm[static_cast<size_t>(d)] = d;
  std::swap(perm[static_cast<size_t>(backend::normalize_dim("transpose", dim0, rank))],
            perm[static_cast<size_t>(backend::normalize_dim("transpose", dim1, rank))]);
  return permute(ctx, x, perm);
}

Variable expand(ExecutionContext& ctx, const Variable& x, const Shape& shape) {
  Tensor y = backend::expand(ctx, x.value(), shape);
  const Shape x_shape = x.shape();
  if (tracing()) trace_attributes("expand", {{"shape", std::vector<int64_t>(shape.dims().begin(), shape.dims().end())}});
  return make_op("expand", std::move(y), {x}, [&ctx, x_shape](const Tensor& dy) {
    return std::vector<Tensor>{backend::sum_to(ctx, dy, x_shape)};
  });
}

Variable narrow(ExecutionContext& ctx, const Variable& x, int dim, int64_t start, int64_t length) {
  Tensor y = backend::narrow(ctx, x.value(), dim, start, length);
  const Shape x_shape = x.shape();
  const int axis = backend::normalize_dim("narrow", dim, x_shape.rank());
  if (tracing()) trace_attributes("narrow", {{"axis", int64_t{axis}}, {"start", start}, {"length", length}});
  return make_op("narrow", std::move(y), {x}, [&ctx, x_shape, axis, start](const Tensor& dy) {
    Tensor dx = Tensor::zeros(x_shape, DType::kF32, dy.device());
    backend::narrow_assign(ctx, dx, axis, start, dy);
    return std::vector<Tensor>{dx};
  });
}

std::vector<Variable> split(ExecutionContext& ctx, const Variable& x, int64_t split_size, int dim) {
  const int axis = backend::normalize_dim("split", dim, x.value().rank());
  TANDEM_CHECK(split_size > 0, ErrorCode::kInvalidArgument, "split: split_size must be positive, got {}", split_size);
  std::vector<Variable> parts;
  const int64_t size = x.shape()[axis];
  for (int64_t start = 0; start < size; start += split_size) {
    parts.push_back(narrow(ctx, x, axis, start, std::min(split_size, size - start)));
  }
  return parts;
}

std::vector<Variable> chunk(ExecutionContext& ctx, const Variable& x, int64_t chunks, int dim) {
  TANDEM_CHECK(chunks > 0, ErrorCode::kInvalidArgument, "chunk: chunks must be positive, got {}", chunks);
  const int axis = backend::normalize_dim("chunk", dim, x.value().rank());
  const int64_t size = x.shape()[axis];
  return split(ctx, x, std::max<int64_t>(1, (size + chunks - 1) / chunks), axis);
}

Variable concat(ExecutionContext& ctx, std::span<const Variable> xs, int dim) {
  std::vector<Tensor> values;
  std::vector<Variable> inputs(xs.begin(), xs.end());
  for (const Variable& x : xs) values.push_back(x.value());
  Tensor y = backend::concat(ctx, values, dim);
  const int axis = backend::normalize_dim("concat", dim, y.rank());
  std::vector<int64_t> sizes;
  for (const Tensor& v : values) sizes.push_back(v.dim(axis));
  if (tracing()) trace_attributes("concat", {{"axis", int64_t{axis}}});
  return make_op("concat", std::move(y), std::move(inputs), [&ctx, axis, sizes](const Tensor& dy) {
    std::vector<Tensor> grads;
    int64_t at = 0;
    for (int64_t size : sizes) {
      grads.push_back(backend::narrow(ctx, dy, axis, at, size));
      at += size;
    }
    return grads;
  });
}

Variable add(ExecutionContext& ctx, const Variable& a, const Variable& b) {
  if (a.shape() == b.shape() && a.value().format() == b.value().format()) {
    Tensor y = backend::add(ctx, a.value(), b.value());
    return make_op("add", std::move(y), {a, b}, [](const Tensor& dy) { return std::vector<Tensor>{dy, dy}; });
  }
  Tensor y = backend::binary(ctx, BinaryOp::kAdd, a.value(), b.value());
  const Shape sa = a.shape(), sb = b.shape();
  return make_op("add", std::move(y), {a, b}, [&ctx, a, b, sa, sb](const Tensor& dy) {
    return std::vector<Tensor>{if_needed(a, backend::sum_to(ctx, dy, sa)), if_needed(b, backend::sum_to(ctx, dy, sb))};
  });
}

Variable sub(ExecutionContext& ctx, const Variable& a, const Variable& b) {
  Tensor y = backend::binary(ctx, BinaryOp::kSub, a.value(), b.value());
  const Shape sa = a.shape(), sb = b.shape();
  return make_op("sub", std::move(y), {a, b}, [&ctx, a, b, sa, sb](const Tensor& dy) {
    Tensor db;
    if (b.requires_grad()) db = backend::scale(ctx, backend::contiguous(ctx, backend::sum_to(ctx, dy, sb)), -1.0f);
    return std::vector<Tensor>{if_needed(a, backend::sum_to(ctx, dy, sa)), db};
  });
}

Variable mul(ExecutionContext& ctx, const Variable& a, const Variable& b) {
  Tensor av = a.value(), bv = b.value();
  if (av.shape() == bv.shape() && av.format() == bv.format()) {
    Tensor y = backend::mul(ctx, av, bv);
    return make_op("mul", std::move(y), {a, b}, [&ctx, av, bv](const Tensor& dy) {
      return std::vector<Tensor>{backend::mul(ctx, dy, bv), backend::mul(ctx, dy, av)};
    });
  }
  Tensor y = backend::binary(ctx, BinaryOp::kMul, av, bv);
  return make_op("mul", std::move(y), {a, b}, [&ctx, a, b, av, bv](const Tensor& dy) {
    Tensor da, db;
    if (a.requires_grad()) da = backend::sum_to(ctx, backend::binary(ctx, BinaryOp::kMul, dy, bv), av.shape());
    if (b.requires_grad()) db = backend::sum_to(ctx, backend::binary(ctx, BinaryOp::kMul, dy, av), bv.shape());
    return std::vector<Tensor>{da, db};
  });
}

Variable div(ExecutionContext& ctx, const Variable& a, const Variable& b) {
  Tensor av = a.value(), bv = b.value();
  Tensor y = backend::binary(ctx, BinaryOp::kDiv, av, bv);
  Tensor yv = y;
  return make_op("div", std::move(y), {a, b}, [&ctx, a, b, av, bv, yv](const Tensor& dy) {
    // y = a / b: da = dy / b, db = -dy y / b.
    Tensor da, db;
    Tensor dy_over_b = backend::binary(ctx, BinaryOp::kDiv, dy, bv);
    if (a.requires_grad()) da = backend::sum_to(ctx, dy_over_b, av.shape());
    if (b.requires_grad()) {
      Tensor g = backend::binary(ctx, BinaryOp::kMul, dy_over_b, yv);
      db = backend::scale(ctx, backend::contiguous(ctx, backend::sum_to(ctx, g, bv.shape())), -1.0f);
    }
    return std::vector<Tensor>{da, db};
  });
}

Variable exp(ExecutionContext& ctx, const Variable& x) { return unary_op(ctx, "exp", UnaryOp::kExp, x); }
Variable log(ExecutionContext& ctx, const Variable& x) { return unary_op(ctx, "log", UnaryOp::kLog, x); }
Variable sqrt(ExecutionContext& ctx, const Variable& x) { return unary_op(ctx, "sqrt", UnaryOp::kSqrt, x); }
Variable rsqrt(ExecutionContext& ctx, const Variable& x) { return unary_op(ctx, "rsqrt", UnaryOp::kRsqrt, x); }
Variable tanh(ExecutionContext& ctx, const Variable& x) { return unary_op(ctx, "tanh", UnaryOp::kTanh, x); }
Variable sigmoid(ExecutionContext& ctx, const Variable& x) { return unary_op(ctx, "sigmoid", UnaryOp::kSigmoid, x); }
Variable silu(ExecutionContext& ctx, const Variable& x) { return unary_op(ctx, "silu", UnaryOp::kSilu, x); }
Variable abs(ExecutionContext& ctx, const Variable& x) { return unary_op(ctx, "abs", UnaryOp::kAbs, x); }
Variable sin(ExecutionContext& ctx, const Variable& x) { return unary_op(ctx, "sin", UnaryOp::kSin, x); }
Variable cos(ExecutionContext& ctx, const Variable& x) { return unary_op(ctx, "cos", UnaryOp::kCos, x); }
Variable gelu(ExecutionContext& ctx, const Variable& x, bool tanh_approximation, bool bf16_output) {
  if (tracing()) trace_attributes("gelu", {{"approximate", std::string(tanh_approximation ? "tanh" : "none")}});
  const UnaryOp op = tanh_approximation ? UnaryOp::kGeluTanh : UnaryOp::kGeluErf;
  if (!bf16_output) return unary_op(ctx, "gelu", op, x);
  // Written in bf16 at once where the device keeps bf16 activations: the graph keeps the bf16 y.
  Tensor xv = x.value();
  Tensor y = backend::unary(ctx, op, xv, true);
  return make_op("gelu", std::move(y), {x}, [&ctx, op, xv](const Tensor& dy) {
    return std::vector<Tensor>{backend::unary_backward(ctx, op, xv, Tensor(), dy)};
  });
}

Variable masked_fill(ExecutionContext& ctx, const Variable& x, const Tensor& mask, float value) {
  Tensor y = backend::masked_fill(ctx, x.value(), mask, value);
  if (tracing()) trace_attributes("masked_fill", {{"mask", mask}, {"value", double{value}}});
  return make_op("masked_fill", std::move(y), {x}, [&ctx, mask](const Tensor& dy) {
    return std::vector<Tensor>{backend::masked_fill(ctx, dy, mask, 0.0f)};  // filled places take no gradient
  });
}

Variable sum(ExecutionContext& ctx, const Variable& x, std::span<const int> dims, bool keepdim) {
  Tensor y = backend::reduce(ctx, Reduction::kSum, x.value(), dims, keepdim);
  trace_reduction("sum", x, dims, keepdim);
  const Shape x_shape = x.shape(), kept = backend::reduced_shape("sum", x_shape, dims, true);
  return make_op("sum", std::move(y), {x}, [&ctx, x_shape, kept](const Tensor& dy) {
    return std::vector<Tensor>{backend::expand(ctx, dy.reshape(kept), x_shape)};
  });
}

Variable mean(ExecutionContext& ctx, const Variable& x, std::span<const int> dims, bool keepdim) {
  Tensor y = backend::reduce(ctx, Reduction::kMean, x.value(), dims, keepdim);
  trace_reduction("mean", x, dims, keepdim);
  const Shape x_shape = x.shape(), kept = backend::reduced_shape("mean", x_shape, dims, true);
  const float inv_count = kept.numel() > 0 && x_shape.numel() > 0
                              ? static_cast<float>(static_cast<double>(kept.numel()) / static_cast<double>(x_shape.numel()))
                              : 0.0f;
  return make_op("mean", std::move(y), {x}, [&ctx, x_shape, kept, inv_count](const Tensor& dy) {
    return std::vector<Tensor>{backend::expand(ctx, backend::scale(ctx, dy.reshape(kept), inv_count), x_shape)};
  });
}

Variable amax(ExecutionContext& ctx, const Variable& x, std::span<const int> dims, bool keepdim) {
  Tensor xv = x.value();
  Tensor y = backend::reduce(ctx, Reduction::kMax, xv, dims, keepdim);
  trace_reduction("amax", x, dims, keepdim);
  std::vector<int> axes(dims.begin(), dims.end());
  return make_op("amax", std::move(y), {x}, [&ctx, xv, axes](const Tensor& dy) {
    return std::vector<Tensor>{backend::max_backward(ctx, xv, axes, dy)};
  });
}

Variable softmax(ExecutionContext& ctx, const Variable& x, int dim) {
  Tensor y = backend::softmax(ctx, x.value(), dim, false);
  if (tracing()) trace_attributes("softmax", {{"axis", int64_t{backend::normalize_dim("softmax", dim, x.value().rank())}}});
  Tensor yv = y;
  return make_op("softmax", std::move(y), {x}, [&ctx, yv, dim](const Tensor& dy) {
    return std::vector<Tensor>{backend::softmax_backward(ctx, yv, backend::contiguous(ctx, dy), dim, false)};
  });
}

Variable log_softmax(ExecutionContext& ctx, const Variable& x, int dim) {
  Tensor y = backend::softmax(ctx, x.value(), dim, true);
  if (tracing()) {
    trace_attributes("log_softmax", {{"axis", int64_t{backend::normalize_dim("log_softmax", dim, x.value().rank())}}});
  }
  Tensor yv = y;
  return make_op("log_softmax", std::move(y), {x}, [&ctx, yv, dim](const Tensor& dy) {
    return std::vector<Tensor>{backend::softmax_backward(ctx, yv, backend::contiguous(ctx, dy), dim, true)};
  });
}

}  // namespace tandem::autograd
