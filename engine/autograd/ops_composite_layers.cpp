// composite.h's layers: index_select, rms_norm, group_norm, conv1d and pad, each a short chain of
// the tape's ops (so they run, and differentiate, wherever those do).
#include <limits>
#include <numeric>
#include <vector>

#include "engine/autograd/composite.h"
#include "engine/backend/factories.h"
#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

std::vector<int64_t> dims_of(const Shape& s) { return {s.dims().begin(), s.dims().end()}; }

Variable reshape_to(ExecutionContext& ctx, const Variable& x, const std::vector<int64_t>& dims) {
  return reshape(ctx, x, std::span<const int64_t>(dims));
}

// Ids are data: on the CPU each is checked here, so the message names index_select, not embedding.
void check_index(const Tensor& index, int64_t size, int dim) {
  TANDEM_CHECK(index.dtype() == DType::kI64 && index.shape().rank() <= 1, ErrorCode::kInvalidArgument,
               "index_select: index must be a 1-D (or single-value) int64 tensor, got {}", index.describe());
  // On a GPU the ids stay there: embedding's kernel gives NaN rows for an id out of range.
  if (!index.device().is_cpu()) return;
  const Tensor host = index.to_format(MemoryFormat::kContiguous);
  const int64_t* id = host.data<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    TANDEM_CHECK(id[i] >= 0 && id[i] < size, ErrorCode::kInvalidArgument,
                 "index_select: index {} at position {} is out of range for dimension {} of size {} (negative "
                 "indices are not taken)",
                 id[i], i, dim, size);
  }
}

// The pieces that pad one dimension of y on one side (left: before its first element).
Variable pad_piece(ExecutionContext& ctx, const Variable& y, int dim, int64_t amount, bool left, PadMode mode,
                   float value) {
  const int64_t size = y.shape()[dim];
  std::vector<int64_t> piece_dims = dims_of(y.shape());
  piece_dims[dim] = amount;
  switch (mode) {
    case PadMode::kConstant:
      return Variable(backend::full(ctx, Shape(std::span<const int64_t>(piece_dims)), value, y.value().dtype()));
    case PadMode::kReplicate: {
      Variable edge = narrow(ctx, y, dim, left ? 0 : size - 1, 1);
      return expand(ctx, edge, Shape(std::span<const int64_t>(piece_dims)));
    }
    case PadMode::kCircular: return narrow(ctx, y, dim, left ? size - amount : 0, amount);
    case PadMode::kReflect: {
      // Left: y[amount], ..., y[1]; right: y[size - 2], ..., y[size - 1 - amount].
      std::vector<Variable> slices;
      for (int64_t k = 0; k < amount; ++k) slices.push_back(narrow(ctx, y, dim, left ? amount - k : size - 2 - k, 1));
      return concat(ctx, slices, dim);
    }
  }
  return {};
}

const char* pad_mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::kConstant: return "constant";
    case PadMode::kReflect: return "reflect";
    case PadMode::kReplicate: return "replicate";
    case PadMode::kCircular: return "circular";
  }
  return "?";
}

Variable pad_dim(ExecutionContext& ctx, Variable y, int dim, int64_t left, int64_t right, PadMode mode, float value) {
  const int64_t size = y.shape()[dim];
  TANDEM_CHECK(size + left + right >= 0, ErrorCode::kInvalidArgument,
               "pad: pads ({}, {}) of dimension {} of size {} leave a negative size", left, right, dim, size);
  if (mode == PadMode::kConstant) {
    const int64_t start = left < 0 ? -left : 0;
    const int64_t kept = size - start - (right < 0 ? -right : 0);
    if (start > 0 || kept < size) y = narrow(ctx, y, dim, start, kept);
  } else {
    TANDEM_CHECK(left >= 0 && right >= 0, ErrorCode::kInvalidArgument,
                 "pad: mode {} takes no negative pad, got ({}, {}) for dimension {}", pad_mode_name(mode), left, right,
                 dim);
    const int64_t limit = mode == PadMode::kReflect ? size - 1 : (mode == PadMode::kCircular ? size : 0);
    TANDEM_CHECK(mode == PadMode::kReplicate ? (size > 0 || left + right == 0) : (left <= limit && right <= limit),
                 ErrorCode::kInvalidArgument,
                 "pad: mode {} needs pads ({}, {}) of dimension {} of size {} to be at most {}{}", pad_mode_name(mode),
                 left, right, dim, size, limit,
                 mode == PadMode::kReplicate ? " (replicate needs a non-empty dimension)" : "");
  }
  std::vector<Variable> parts;
  if (left > 0) parts.push_back(pad_piece(ctx, y, dim, left, true, mode, value));
  parts.push_back(y);
  if (right > 0) parts.push_back(pad_piece(ctx, y, dim, right, false, mode, value));
  return parts.size() == 1 ? y : concat(ctx, parts, dim);
}

}  // namespace

Variable index_select(ExecutionContext& ctx, const Variable& x, int dim, const Tensor& index) {
  const Shape s = x.shape();
  TANDEM_CHECK(s.rank() >= 1 && x.value().dtype() == DType::kF32, ErrorCode::kInvalidArgument,
               "index_select: x must be an f32 tensor of rank 1 or more, got {}", x.value().describe());
  const int d = backend::normalize_dim("index_select", dim, s.rank());
  check_index(index, s[d], d);
  const Tensor ids = index.reshape(Shape{index.numel()});
  // Bring dim to the front, take rows of the (size, rest) table, and put it back.
  std::vector<int> to_front(static_cast<size_t>(s.rank()));
  std::iota(to_front.begin(), to_front.end(), 0);
  to_front.erase(to_front.begin() + d);
  to_front.insert(to_front.begin(), d);
  const Variable moved = d == 0 ? x : permute(ctx, x, to_front);
  std::vector<int64_t> moved_dims = dims_of(moved.shape());
  const int64_t rest = std::accumulate(moved_dims.begin() + 1, moved_dims.end(), int64_t{1}, std::multiplies<>());
  Variable rows = embedding(ctx, reshape_to(ctx, moved, {moved_dims[0], rest}), ids);
  moved_dims[0] = ids.numel();
  rows = reshape_to(ctx, rows, moved_dims);
  if (d == 0) return rows;
  std::vector<int> back(static_cast<size_t>(s.rank()));
  for (int k = 0; k < s.rank(); ++k) back[k] = k < d ? k + 1 : (k == d ? 0 : k);
  return permute(ctx, rows, back);
}

Variable rms_norm(ExecutionContext& ctx, const Variable& x, int normalized_dims, const Variable& weight,
                  std::optional<float> eps) {
  const Shape s = x.shape();
  TANDEM_CHECK(normalized_dims >= 1 && normalized_dims <= s.rank(), ErrorCode::kInvalidArgument,
               "rms_norm: normalized_dims {} must be in [1, {}] for input {}", normalized_dims, s.rank(), s.str());
  std::vector<int> dims;
  for (int k = s.rank() - normalized_dims; k < s.rank(); ++k) dims.push_back(k);
  if (weight.defined()) {
    // Indexed, not an iterator range: GCC 12's -Warray-bounds (at -O1 under TSan) cannot see that
    // the check above keeps end() - normalized_dims inside the shape.
    std::vector<int64_t> trailing;
    for (int k = s.rank() - normalized_dims; k < s.rank(); ++k) trailing.push_back(s[k]);
    TANDEM_CHECK(weight.shape() == Shape(std::span<const int64_t>(trailing)), ErrorCode::kInvalidArgument,
                 "rms_norm: weight {} must have the normalized dimensions' shape {}", weight.shape().str(),
                 Shape(std::span<const int64_t>(trailing)).str());
  }
  const float e = eps.value_or(std::numeric_limits<float>::epsilon());
  TANDEM_CHECK(e >= 0.0f, ErrorCode::kInvalidArgument, "rms_norm: eps must be non-negative, got {}", e);
  const Variable eps_v(backend::full(ctx, Shape{}, e));
  const Variable mean_square = mean(ctx, mul(ctx, x, x), dims, true);
  Variable y = mul(ctx, x, rsqrt(ctx, add(ctx, mean_square, eps_v)));
  return weight.defined() ? mul(ctx, y, weight) : y;
}

Variable group_norm(ExecutionContext& ctx, const Variable& x, int64_t groups, const Variable& weight,
                    const Variable& bias, float eps) {
  const Shape s = x.shape();
  TANDEM_CHECK(s.rank() >= 2 && groups > 0 && s[1] % groups == 0, ErrorCode::kInvalidArgument,
               "group_norm: input {} must be (N, C, ...) with C divisible by groups {}", s.str(), groups);
  for (const Variable* p : {&weight, &bias}) {
    TANDEM_CHECK(!p->defined() || p->shape() == Shape{s[1]}, ErrorCode::kInvalidArgument,
                 "group_norm: weight and bias must have shape [{}] (one per channel), got {}", s[1], p->shape().str());
  }
  // The group's size written out: a -1 beside an empty batch would be ambiguous (reshape refuses it).
  int64_t group_size = s[1] / groups;
  for (int k = 2; k < s.rank(); ++k) group_size *= s[k];
  Variable y = layer_norm(ctx, reshape_to(ctx, x, {s[0], groups, group_size}), 1, {}, {}, eps);
  y = reshape(ctx, y, s);
  std::vector<int64_t> per_channel(static_cast<size_t>(s.rank()), 1);
  per_channel[1] = s[1];
  if (weight.defined()) y = mul(ctx, y, reshape_to(ctx, weight, per_channel));
  if (bias.defined()) y = add(ctx, y, reshape_to(ctx, bias, per_channel));
  return y;
}

Variable conv1d(ExecutionContext& ctx, const Variable& x, const Variable& w, const Variable& b,
                const Conv1dParams& params) {
  const Shape s = x.shape();
  TANDEM_CHECK((s.rank() == 2 || s.rank() == 3) && w.shape().rank() == 3, ErrorCode::kInvalidArgument,
               "conv1d: expects x (N, C, L) or (C, L) and weight (K, C / groups, R), got x {} and weight {}", s.str(),
               w.shape().str());
  const bool batched = s.rank() == 3;
  const int64_t n = batched ? s[0] : 1, c = s[s.rank() - 2], l = s[s.rank() - 1];
  const Shape ws = w.shape();
  backend::Conv2dParams p2;
  p2.stride = {1, params.stride};
  p2.padding = {0, params.padding};
  p2.dilation = {1, params.dilation};
  p2.groups = params.groups;
  Variable y = conv2d(ctx, reshape_to(ctx, x, {n, c, 1, l}), reshape_to(ctx, w, {ws[0], ws[1], 1, ws[2]}), b, p2);
  const Shape ys = y.shape();
  return batched ? reshape_to(ctx, y, {ys[0], ys[1], ys[3]}) : reshape_to(ctx, y, {ys[1], ys[3]});
}

Variable pad(ExecutionContext& ctx, const Variable& x, std::span<const int64_t> pads, PadMode mode, float value) {
  const int rank = x.shape().rank();
  TANDEM_CHECK(pads.size() % 2 == 0 && static_cast<int>(pads.size()) <= 2 * rank, ErrorCode::kInvalidArgument,
               "pad: pads must hold an even number of values, at most two per dimension of the rank-{} input; got {}",
               rank, pads.size());
  Variable y = x;
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    y = pad_dim(ctx, y, rank - 1 - static_cast<int>(i), pads[2 * i], pads[2 * i + 1], mode, value);
  }
  return y;
}

}  // namespace tandem::autograd
