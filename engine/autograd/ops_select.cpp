// composite.h's selection ops: where, gather, topk, clamp, cumsum, one_hot, argmax and nll_loss, over the
// backend's compare, where, cast and gather kernels and the tape's ops.
#include <algorithm>
#include <limits>
#include <vector>

#include "engine/autograd/composite.h"
#include "engine/autograd/trace.h"
#include "engine/backend/factories.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

using backend::CompareOp;

// Shape s with a dimension of size 1 appended (ids (..., 1) against classes (C)).
Shape with_trailing_one(const Shape& s) {
  std::vector<int64_t> dims(s.dims().begin(), s.dims().end());
  dims.push_back(1);
  return Shape(std::span<const int64_t>(dims));
}

// These ops compute masks and indices off the tape, which a trace would keep as constants of the
// example input: an exported graph would be wrong for every other input, so export refuses them.
void refuse_export(const char* op) {
  TANDEM_CHECK(!tracing(), ErrorCode::kUnimplemented,
               "{}: export_onnx does not write {} yet (its mask or indices depend on the input); keep it out of the "
               "exported forward",
               op, op);
}

// The ids on the host, for the checks PyTorch also makes there.
std::vector<int64_t> host_ids(const Tensor& ids) {
  const Tensor host = ids.to(Device::cpu()).to_format(MemoryFormat::kContiguous);
  const int64_t* p = host.data<int64_t>();
  return {p, p + host.numel()};
}

// x's dimension d moved last (or x itself when it is last).
Variable dim_last(ExecutionContext& ctx, const Variable& x, int d) {
  return d == x.shape().rank() - 1 ? x : transpose(ctx, x, d, x.shape().rank() - 1);
}

// The smallest value along the last dimension, kept as size 1.
Tensor min_last(ExecutionContext& ctx, const Tensor& v) {
  const int last[] = {v.shape().rank() - 1};
  return backend::scale(ctx, amax(ctx, Variable(backend::scale(ctx, v, -1.0f)), last, true).value(), -1.0f);
}

}  // namespace

Variable where(ExecutionContext& ctx, const Tensor& cond, const Variable& a, const Variable& b) {
  Tensor y = backend::where(ctx, cond, a.value(), b.value());
  const Shape sa = a.shape(), sb = b.shape();
  return make_op("where", std::move(y), {a, b}, [&ctx, cond, sa, sb](const Tensor& dy) {
    const Tensor zero = backend::zeros(ctx, Shape{});
    return std::vector<Tensor>{backend::sum_to(ctx, backend::where(ctx, cond, dy, zero), sa),
                               backend::sum_to(ctx, backend::where(ctx, cond, zero, dy), sb)};
  });
}

Variable gather(ExecutionContext& ctx, const Variable& x, int dim, const Tensor& index) {
  Tensor y = backend::gather(ctx, x.value(), dim, index);
  const Shape x_shape = x.shape();
  return make_op("gather", std::move(y), {x}, [&ctx, dim, index, x_shape](const Tensor& dy) {
    return std::vector<Tensor>{backend::gather_backward(ctx, dy, dim, index, x_shape)};
  });
}

TopK topk(ExecutionContext& ctx, const Variable& x, int64_t k, int dim, bool largest) {
  TANDEM_CHECK(x.shape().rank() >= 1, ErrorCode::kInvalidArgument, "topk: x must have a dimension, got {}",
               x.value().describe());
  Tensor indices = backend::topk_indices(ctx, x.value(), k, dim, largest);
  Variable values = gather(ctx, x, dim, indices);
  return {std::move(values), std::move(indices)};
}

Variable clamp(ExecutionContext& ctx, const Variable& x, std::optional<float> min, std::optional<float> max) {
  refuse_export("clamp");
  TANDEM_CHECK(min.has_value() || max.has_value(), ErrorCode::kInvalidArgument,
               "clamp: at least one of min and max must be given");
  Variable y = x;
  if (min) y = masked_fill(ctx, y, backend::compare(ctx, CompareOp::kLt, y.value(), *min), *min);
  if (max) y = masked_fill(ctx, y, backend::compare(ctx, CompareOp::kGt, y.value(), *max), *max);
  // A NaN stays NaN but, as in PyTorch (x >= min and x <= max fail), passes no gradient.
  return masked_fill(ctx, y, backend::compare(ctx, CompareOp::kNe, x.value(), x.value()),
                     std::numeric_limits<float>::quiet_NaN());
}

Variable cumsum(ExecutionContext& ctx, const Variable& x, int dim) {
  const int d = backend::normalize_dim("cumsum", dim, std::max(x.shape().rank(), 1));
  if (x.shape().rank() == 0) return x;
  const int64_t n = x.shape()[d];
  Variable y = x;
  // Hillis-Steele: after the step of shift s, y[i] holds the sum of x[i - 2s + 1 .. i].
  for (int64_t shift = 1; shift < n; shift *= 2) {
    std::vector<int64_t> zero_dims(y.shape().dims().begin(), y.shape().dims().end());
    zero_dims[d] = shift;
    const Variable parts[] = {Variable(backend::zeros(ctx, Shape(std::span<const int64_t>(zero_dims)))),
                              narrow(ctx, y, d, 0, n - shift)};
    y = add(ctx, y, concat(ctx, parts, d));
  }
  return y;
}

Tensor one_hot(ExecutionContext& ctx, const Tensor& ids, int64_t num_classes) {
  refuse_export("one_hot");
  TANDEM_CHECK(ids.defined() && ids.dtype() == DType::kI64, ErrorCode::kInvalidArgument,
               "one_hot: ids must be an i64 tensor, got {}", ids.defined() ? ids.describe() : "undefined");
  TANDEM_CHECK(num_classes >= -1, ErrorCode::kInvalidArgument, "one_hot: num_classes must be -1 or >= 0, got {}",
               num_classes);
  const std::vector<int64_t> v = host_ids(ids);
  if (num_classes == -1) {
    TANDEM_CHECK(!v.empty(), ErrorCode::kInvalidArgument,
                 "one_hot: cannot infer the number of classes from empty ids; pass num_classes");
    num_classes = *std::max_element(v.begin(), v.end()) + 1;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    TANDEM_CHECK(v[i] >= 0 && v[i] < num_classes, ErrorCode::kInvalidArgument,
                 "one_hot: id {} at position {} is outside [0, {})", v[i], i, num_classes);
  }
  const Tensor column = backend::contiguous(ctx, ids).reshape(with_trailing_one(ids.shape()));
  const Tensor classes = backend::arange(ctx, 0.0, static_cast<double>(num_classes), 1.0, DType::kI64);
  return backend::cast(ctx, backend::compare(ctx, CompareOp::kEq, column, classes), DType::kI64);
}

Tensor argmax(ExecutionContext& ctx, const Variable& x, std::optional<int> dim, bool keepdim) {
  refuse_export("argmax");
  NoGradGuard values_only;
  const Shape s = x.shape();
  if (!dim) {
    Tensor flat_index = argmax(ctx, reshape(ctx, x, Shape{s.numel()}), 0, false);
    return keepdim ? flat_index.reshape(Shape(std::span<const int64_t>(std::vector<int64_t>(s.rank(), 1))))
                   : flat_index;
  }
  const int d = backend::normalize_dim("argmax", *dim, std::max(s.rank(), 1));
  TANDEM_CHECK(s.rank() > 0 && s[d] > 0, ErrorCode::kInvalidArgument,
               "argmax: dimension {} of {} is empty (or x is a scalar): there is no largest value", d, s.str());
  const int64_t n = s[d];
  TANDEM_CHECK(n <= (int64_t{1} << 24), ErrorCode::kUnimplemented,
               "argmax: a dimension of {} values is not supported (indices are counted in f32, up to 2^24)", n);
  const Tensor v = dim_last(ctx, x, d).value();
  const Tensor m = amax(ctx, Variable(v), std::vector<int>{v.shape().rank() - 1}, true).value();
  const Tensor index = backend::expand(ctx, backend::arange(ctx, 0.0, static_cast<double>(n), 1.0, DType::kF32),
                                       v.shape());
  const float none = static_cast<float>(n);
  // The first maximum, and the first NaN, which wins where there is one.
  const Tensor at_max = min_last(ctx, backend::masked_fill(ctx, index, backend::compare(ctx, CompareOp::kNe, v, m), none));
  const Tensor at_nan = min_last(ctx, backend::masked_fill(ctx, index, backend::compare(ctx, CompareOp::kEq, v, v), none));
  Tensor best = backend::where(ctx, backend::compare(ctx, CompareOp::kLt, at_nan, none), at_nan, at_max);
  // best is (moved..., 1): put the kept dimension back where dim was, or drop it.
  std::vector<int64_t> dims(s.dims().begin(), s.dims().end());
  if (keepdim) {
    dims[d] = 1;
  } else {
    dims.erase(dims.begin() + d);
  }
  if (d != s.rank() - 1) best = transpose(ctx, Variable(best), d, s.rank() - 1).value();
  best = backend::contiguous(ctx, best).reshape(Shape(std::span<const int64_t>(dims)));
  return backend::cast(ctx, best, DType::kI64);
}

Variable nll_loss(ExecutionContext& ctx, const Variable& input, const Tensor& target, int64_t ignore_index,
                  LossReduction reduction) {
  refuse_export("nll_loss");
  const Shape s = input.shape();
  TANDEM_CHECK(s.rank() == 2 && target.defined() && target.dtype() == DType::kI64 && target.shape() == Shape{s[0]},
               ErrorCode::kInvalidArgument, "nll_loss: expects input (N, C) and an i64 target (N), got {} and {}",
               s.str(), target.defined() ? target.describe() : "undefined");
  if (target.device().is_cpu()) {
    const std::vector<int64_t> t = host_ids(target);
    for (size_t i = 0; i < t.size(); ++i) {
      TANDEM_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < s[1]), ErrorCode::kInvalidArgument,
                   "nll_loss: target {} at position {} is outside [0, {}) and is not ignore_index {}", t[i], i, s[1],
                   ignore_index);
    }
  }
  const Tensor column = backend::contiguous(ctx, target).reshape(Shape{s[0], 1});
  const Tensor classes = backend::arange(ctx, 0.0, static_cast<double>(s[1]), 1.0, DType::kI64);
  const Tensor ignored = backend::compare(ctx, CompareOp::kEq, target, static_cast<double>(ignore_index));
  const int per_row[] = {1};
  Variable picked = masked_fill(ctx, input, backend::compare(ctx, CompareOp::kNe, column, classes), 0.0f);
  Variable rows = masked_fill(ctx, scale(ctx, sum(ctx, picked, per_row, false), -1.0f), ignored, 0.0f);
  switch (reduction) {
    case LossReduction::kNone: return rows;
    case LossReduction::kSum: return sum(ctx, rows);
    case LossReduction::kMean: {
      const Tensor kept = backend::cast(ctx, backend::compare(ctx, CompareOp::kNe, target,
                                                              static_cast<double>(ignore_index)), DType::kF32);
      const Tensor count = backend::sum(ctx, kept);  // a constant: no gradient flows into it
      return div(ctx, sum(ctx, rows), Variable(count));
    }
    case LossReduction::kBatchMean: break;
  }
  throw_error(ErrorCode::kInvalidArgument,
              "nll_loss: reduction kBatchMean is kl_div's alone (as PyTorch's 'batchmean'); use kMean, kSum or kNone");
}

}  // namespace tandem::autograd
