// The checked entry points of ops.h for the transformer's ops: layer normalisation, batched
// matrix products with broadcast batch dimensions, scaled dot-product attention (also on a packed
// q/k/v projection) and embedding.
#include <array>
#include <vector>

#include "engine/backend/kernels.h"
#include "engine/backend/ops.h"
#include "engine/backend/ops_validate.h"

namespace tandem::backend {
namespace {

using namespace detail;

// The shape with its last `count` dimensions replaced by `tail`.
Shape replace_tail(const Shape& s, int count, std::initializer_list<int64_t> tail) {
  std::vector<int64_t> dims(s.dims().begin(), s.dims().end() - count);
  dims.insert(dims.end(), tail.begin(), tail.end());
  return Shape(std::span<const int64_t>(dims));
}

Shape leading(const Shape& s, int keep_last) {
  return Shape(std::span<const int64_t>(s.dims().begin(), s.dims().end() - keep_last));
}

}  // namespace

LayerNormForward layer_norm_forward(Ctx& ctx, const Tensor& x_in, int normalized_dims, const Tensor& gamma,
                                    const Tensor& beta, float eps, bool bf16_output) {
  constexpr std::string_view op = "layer_norm_forward";
  check_tensor(op, "x", x_in, ctx, DType::kF32, -1, "");
  Tensor x = contiguous(ctx, x_in);
  TANDEM_CHECK(normalized_dims >= 1 && normalized_dims <= x.rank(), ErrorCode::kInvalidArgument,
               "{}: normalising over the last {} dimensions of x {}", op, normalized_dims, x.shape().str());
  TANDEM_CHECK(eps > 0.0f, ErrorCode::kInvalidArgument, "{}: eps must be positive, got {}", op, eps);
  int64_t n = 1;
  for (int d = x.rank() - normalized_dims; d < x.rank(); ++d) n *= x.dim(d);
  const int64_t rows = n > 0 ? x.numel() / n : 0;
  if (gamma.defined()) check_tensor(op, "weight", gamma, ctx, DType::kF32, -1, "");
  if (beta.defined()) check_tensor(op, "bias", beta, ctx, DType::kF32, -1, "");
  for (const Tensor* p : {&gamma, &beta}) {
    TANDEM_CHECK(!p->defined() || p->numel() == n, ErrorCode::kInvalidArgument,
                 "{}: weight and bias must have the normalized shape's {} elements, got {}", op, n, p->describe());
  }
  const DType y_type = bf16_output && keeps_bf16(ctx) ? DType::kBF16 : DType::kF32;
  LayerNormForward out{Tensor::empty(x.shape(), y_type, ctx.device()),
                       Tensor::empty({rows}, DType::kF32, ctx.device()),
                       Tensor::empty({rows}, DType::kF32, ctx.device())};
  TANDEM_CHECK(n > 0, ErrorCode::kInvalidArgument, "{}: the normalized shape of x {} holds no element", op,
               x.shape().str());
  if (rows == 0) return out;  // an empty batch: nothing to normalise, an empty result as PyTorch's
  Tensor x2 = x.reshape({rows, n});
  Tensor y2 = out.y.reshape({rows, n});
  Tensor g = gamma.defined() ? gamma.reshape({n}) : Tensor(), b = beta.defined() ? beta.reshape({n}) : Tensor();
  entry(table(ctx).layer_norm_forward, op, ctx)(ctx, eps, x2, g, b, y2, out.mean, out.var);
  return out;
}

LayerNormGrads layer_norm_backward(Ctx& ctx, const Tensor& x_in, const Tensor& dy_in, const Tensor& gamma,
                                   bool with_bias, const Tensor& mean, const Tensor& var, float eps) {
  constexpr std::string_view op = "layer_norm_backward";
  Tensor x = contiguous(ctx, x_in), dy = contiguous(ctx, dy_in);
  check_same(op, "x", x, "dy", dy);
  const int64_t rows = mean.numel(), n = rows > 0 ? x.numel() / rows : 0;
  LayerNormGrads g{Tensor::empty(x.shape(), DType::kF32, ctx.device()), Tensor(), Tensor()};
  if (gamma.defined()) g.dweight = Tensor::empty(gamma.shape(), DType::kF32, ctx.device());
  if (with_bias) g.dbias = Tensor::empty(gamma.defined() ? gamma.shape() : Shape{n}, DType::kF32, ctx.device());
  if (rows == 0 || x.numel() == 0) {  // an empty batch: no gradient for x, zeros for the affine terms
    for (Tensor* t : {&g.dweight, &g.dbias}) {
      if (t->defined() && t->numel() > 0) fill(ctx, 0.0f, *t);
    }
    return g;
  }
  Tensor dx2 = g.dx.reshape({rows, n});
  Tensor dg = g.dweight.defined() ? g.dweight.reshape({n}) : Tensor();
  Tensor db = g.dbias.defined() ? g.dbias.reshape({n}) : Tensor();
  entry(table(ctx).layer_norm_backward, op, ctx)(ctx, eps, x.reshape({rows, n}), dy.reshape({rows, n}),
                                                 gamma.defined() ? gamma.reshape({n}) : Tensor(), mean, var, dx2, dg,
                                                 db);
  return g;
}

Tensor matmul_nd(Ctx& ctx, const Tensor& a_in, const Tensor& b_in, bool transpose_a, bool transpose_b) {
  constexpr std::string_view op = "matmul";
  check_tensor(op, "a", a_in, ctx, DType::kF32, -1, "");
  check_tensor(op, "b", b_in, ctx, DType::kF32, -1, "");
  TANDEM_CHECK(a_in.rank() >= 2 && b_in.rank() >= 2, ErrorCode::kInvalidArgument,
               "{}: takes matrices (..., M, K) and (..., K, N), got {} and {}", op, a_in.shape().str(),
               b_in.shape().str());
  if (a_in.rank() == 2 && b_in.rank() == 2) return matmul(ctx, a_in, b_in, transpose_a, transpose_b);
  Tensor a = contiguous(ctx, a_in), b = contiguous(ctx, b_in);
  const int64_t m = transpose_a ? a.dim(-1 + a.rank()) : a.dim(a.rank() - 2);
  const int64_t ka = transpose_a ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
  const int64_t kb = transpose_b ? b.dim(b.rank() - 1) : b.dim(b.rank() - 2);
  const int64_t n = transpose_b ? b.dim(b.rank() - 2) : b.dim(b.rank() - 1);
  TANDEM_CHECK(ka == kb, ErrorCode::kInvalidArgument,
               "{}: a {} gives K = {} (transpose_a = {}) but b {} gives K = {} (transpose_b = {})", op,
               a.shape().str(), ka, transpose_a, b.shape().str(), kb, transpose_b);
  const Shape batch = broadcast_shapes(op, leading(a.shape(), 2), leading(b.shape(), 2));
  // Each operand goes in as (1 or B, rows, cols): a batch that broadcasts only partly is expanded.
  auto as_batched = [&](Tensor t) {
    const Shape lead = leading(t.shape(), 2);
    if (lead.numel() != 1 && !(lead == batch)) {
      t = expand(ctx, t, replace_tail(batch, 0, {t.dim(t.rank() - 2), t.dim(t.rank() - 1)}));
    }
    const int64_t count = leading(t.shape(), 2).numel();
    return t.reshape({count, t.dim(t.rank() - 2), t.dim(t.rank() - 1)});
  };
  Tensor a3 = as_batched(a), b3 = as_batched(b);
  Tensor c = Tensor::empty(replace_tail(batch, 0, {m, n}), DType::kF32, ctx.device());
  Tensor c3 = c.reshape({batch.numel(), m, n});
  entry(table(ctx).batched_matmul, op, ctx)(ctx, a3, b3, transpose_a, transpose_b, c3);
  return c;
}

namespace {

void check_attention(std::string_view op, const Ctx& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& mask) {
  check_tensor(op, "q", q, ctx, DType::kF32, 4, "(B, H, Tq, D)");
  check_tensor(op, "k", k, ctx, DType::kF32, 4, "(B, H, Tk, D)");
  check_tensor(op, "v", v, ctx, DType::kF32, 4, "(B, H, Tk, Dv)");
  TANDEM_CHECK(k.dim(0) == q.dim(0) && k.dim(1) == q.dim(1) && k.dim(3) == q.dim(3), ErrorCode::kInvalidArgument,
               "{}: k {} must be (B, H, Tk, D) with q {}'s B, H and D", op, k.shape().str(), q.shape().str());
  TANDEM_CHECK(v.dim(0) == q.dim(0) && v.dim(1) == q.dim(1) && v.dim(2) == k.dim(2), ErrorCode::kInvalidArgument,
               "{}: v {} must be (B, H, Tk, Dv) with q {}'s B and H and k {}'s Tk", op, v.shape().str(),
               q.shape().str(), k.shape().str());
  for (const Tensor* t : {&q, &k, &v}) {
    TANDEM_CHECK(t->format() == MemoryFormat::kContiguous, ErrorCode::kInvalidArgument,
                 "{}: q, k and v must be contiguous, got {} in channels_last", op, t->describe());
  }
  if (!mask.defined()) return;
  check_tensor(op, "attn_mask", mask, ctx, DType::kF32, 4, "(B or 1, H or 1, Tq, Tk), added to the scores");
  TANDEM_CHECK((mask.dim(0) == 1 || mask.dim(0) == q.dim(0)) && (mask.dim(1) == 1 || mask.dim(1) == q.dim(1)) &&
                   mask.dim(2) == q.dim(2) && mask.dim(3) == k.dim(2),
               ErrorCode::kInvalidArgument, "{}: attn_mask {} must be (B or 1, H or 1, Tq, Tk) = ({} or 1, {} or 1, {}, {})",
               op, mask.shape().str(), q.dim(0), q.dim(1), q.dim(2), k.dim(2));
}

}  // namespace

AttentionForward attention_forward(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& mask) {
  constexpr std::string_view op = "scaled_dot_product_attention";
  check_attention(op, ctx, q, k, v, mask);
  TANDEM_CHECK(p.dropout_p >= 0.0f && p.dropout_p < 1.0f, ErrorCode::kInvalidArgument,
               "{}: dropout_p must be in [0, 1), got {}", op, p.dropout_p);
  AttentionForward out{Tensor::empty({q.dim(0), q.dim(1), q.dim(2), v.dim(3)}, DType::kF32, ctx.device()),
                       Tensor::empty({q.dim(0), q.dim(1), q.dim(2)}, DType::kF32, ctx.device())};
  if (q.numel() == 0 || out.y.numel() == 0) return out;
  entry(table(ctx).attention_forward, op, ctx)(ctx, p, q, k, v, mask, out.y, out.lse);
  return out;
}

AttentionGrads attention_backward(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& mask, const Tensor& y, const Tensor& lse,
                                  const Tensor& dy) {
  constexpr std::string_view op = "scaled_dot_product_attention_backward";
  check_attention(op, ctx, q, k, v, mask);
  check_same(op, "y", y, "dy", dy);
  AttentionGrads g{Tensor::empty(q.shape(), DType::kF32, ctx.device()),
                   Tensor::empty(k.shape(), DType::kF32, ctx.device()),
                   Tensor::empty(v.shape(), DType::kF32, ctx.device())};
  if (q.numel() == 0 || k.numel() == 0) {
    for (Tensor* t : {&g.dq, &g.dk, &g.dv}) t->zero_();
    return g;
  }
  entry(table(ctx).attention_backward, op, ctx)(ctx, p, q, k, v, mask, y, lse, dy, g.dq, g.dk, g.dv);
  return g;
}

namespace {

// The sizes of a packed projection qkv (B, T, 3 H D).
struct PackedShape {
  int64_t b, t, h, d;
  int64_t c() const { return h * d; }
};

PackedShape check_packed(std::string_view op, const Ctx& ctx, const AttentionParams& p, int64_t heads,
                         const Tensor& qkv) {
  check_tensor(op, "qkv", qkv, ctx, activation_dtype(ctx, qkv), 3, "(B, T, 3 H D)");
  TANDEM_CHECK(qkv.format() == MemoryFormat::kContiguous, ErrorCode::kInvalidArgument,
               "{}: qkv {} must be contiguous", op, qkv.describe());
  TANDEM_CHECK(heads >= 1, ErrorCode::kInvalidArgument, "{}: heads must be at least 1, got {}", op, heads);
  const int64_t width = qkv.dim(2);
  TANDEM_CHECK(width > 0 && width % (3 * heads) == 0, ErrorCode::kInvalidArgument,
               "{}: the last dimension of qkv {} must be 3 * heads * head_dim, a positive multiple of 3 * {} = {}; "
               "pass the output of a Linear(C, 3 C) whose C is a multiple of heads",
               op, qkv.shape().str(), heads, 3 * heads);
  TANDEM_CHECK(p.dropout_p >= 0.0f && p.dropout_p < 1.0f, ErrorCode::kInvalidArgument,
               "{}: dropout_p must be in [0, 1), got {}", op, p.dropout_p);
  return {qkv.dim(0), qkv.dim(1), heads, width / (3 * heads)};
}

// The forward's y (B, T, H D) and lse (B, H, T) for qkv, and dy of y's shape.
void check_packed_saved(std::string_view op, const Ctx& ctx, const PackedShape& s, const Tensor& qkv,
                        const Tensor& y, const Tensor& lse, const Tensor& dy) {
  check_tensor(op, "y", y, ctx, activation_dtype(ctx, y), 3, "(B, T, H D)");
  TANDEM_CHECK(y.shape() == (Shape{s.b, s.t, s.c()}), ErrorCode::kInvalidArgument,
               "{}: y {} must be (B, T, H D) = ({}, {}, {}) for qkv {}", op, y.shape().str(), s.b, s.t, s.c(),
               qkv.shape().str());
  check_tensor(op, "dy", dy, ctx, DType::kF32, 3, "(B, T, H D)");
  check_same(op, "y", y, "dy", dy);
  check_tensor(op, "lse", lse, ctx, DType::kF32, 3, "(B, H, T)");
  TANDEM_CHECK(lse.shape() == (Shape{s.b, s.h, s.t}), ErrorCode::kInvalidArgument,
               "{}: lse {} must be (B, H, T) = ({}, {}, {}), the forward's", op, lse.shape().str(), s.b, s.h, s.t);
}

bool packed_kernels(Ctx& ctx, const AttentionParams& p, const PackedShape& s) {
  const auto supported = table(ctx).packed_attention_supported;
  return supported != nullptr && supported(ctx, p, s.d);
}

// q, k and v (B, H, T, D), contiguous: qkv (B, T, 3, H, D) permuted to (3, B, H, T, D) and cut in
// three, the very copies autograd's permute and split made before this op, so the bits match.
std::array<Tensor, 3> split_heads(Ctx& ctx, const Tensor& qkv, const PackedShape& s) {
  const int perm[] = {2, 0, 3, 1, 4};
  Tensor heads = permute(ctx, qkv.reshape({s.b, s.t, 3, s.h, s.d}), perm);
  auto part = [&](int64_t i) { return narrow(ctx, heads, 0, i, 1).reshape({s.b, s.h, s.t, s.d}); };
  return {part(0), part(1), part(2)};
}

// (B, H, T, D) <-> (B, T, H D): the permutation {0, 2, 1, 3} is its own inverse.
Tensor merge_heads(Ctx& ctx, const Tensor& x, const PackedShape& s) {
  const int perm[] = {0, 2, 1, 3};
  return permute(ctx, x, perm).reshape({s.b, s.t, s.c()});
}

Tensor unmerge_heads(Ctx& ctx, const Tensor& x, const PackedShape& s) {
  const int perm[] = {0, 2, 1, 3};
  return permute(ctx, x.reshape({s.b, s.t, s.h, s.d}), perm);
}

}  // namespace

AttentionForward packed_attention_forward(Ctx& ctx, const AttentionParams& p, int64_t heads, const Tensor& qkv,
                                          bool bf16_output) {
  constexpr std::string_view op = "packed_self_attention";
  const PackedShape s = check_packed(op, ctx, p, heads, qkv);
  const bool bf16_y = bf16_output && keeps_bf16(ctx);
  // An empty batch or sequence gives empty results, as PyTorch's.
  if (packed_kernels(ctx, p, s) || s.b == 0 || s.t == 0) {
    AttentionForward out{Tensor::empty({s.b, s.t, s.c()}, bf16_y ? DType::kBF16 : DType::kF32, ctx.device()),
                         Tensor::empty({s.b, s.h, s.t}, DType::kF32, ctx.device())};
    if (out.y.numel() > 0) entry(table(ctx).packed_attention_forward, op, ctx)(ctx, p, heads, qkv, out.y, out.lse);
    return out;
  }
  const std::array<Tensor, 3> h = split_heads(ctx, widened(ctx, qkv), s);
  AttentionForward f = attention_forward(ctx, p, h[0], h[1], h[2]);
  const Tensor y = merge_heads(ctx, f.y, s);
  return {bf16_y ? bf16_operand(ctx, y) : y, std::move(f.lse)};  // bf16: y rounded once
}

Tensor packed_attention_backward(Ctx& ctx, const AttentionParams& p, int64_t heads, const Tensor& qkv,
                                 const Tensor& y, const Tensor& lse, const Tensor& dy) {
  constexpr std::string_view op = "packed_self_attention_backward";
  const PackedShape s = check_packed(op, ctx, p, heads, qkv);
  check_packed_saved(op, ctx, s, qkv, y, lse, dy);
  if (s.b == 0 || s.t == 0) return Tensor::empty(qkv.shape(), DType::kF32, ctx.device());  // no element to write
  if (packed_kernels(ctx, p, s)) {
    Tensor dqkv = Tensor::empty(qkv.shape(), DType::kF32, ctx.device());
    entry(table(ctx).packed_attention_backward, op, ctx)(ctx, p, heads, qkv, y, lse, dy, dqkv);
    return dqkv;
  }
  const std::array<Tensor, 3> h = split_heads(ctx, widened(ctx, qkv), s);
  AttentionGrads g = attention_backward(ctx, p, h[0], h[1], h[2], Tensor(), unmerge_heads(ctx, widened(ctx, y), s),
                                        lse, unmerge_heads(ctx, dy, s));
  // (3, B, H, T, D) -> (B, T, 3, H, D): the inverse of split_heads' permutation.
  const Tensor grads[] = {g.dq.reshape({1, s.b, s.h, s.t, s.d}), g.dk.reshape({1, s.b, s.h, s.t, s.d}),
                          g.dv.reshape({1, s.b, s.h, s.t, s.d})};
  const int perm[] = {1, 3, 0, 2, 4};
  return permute(ctx, concat(ctx, grads, 0), perm).reshape(qkv.shape());
}

Tensor embedding_forward(Ctx& ctx, const Tensor& weight, const Tensor& ids) {
  constexpr std::string_view op = "embedding";
  check_tensor(op, "weight", weight, ctx, DType::kF32, 2, "(num_embeddings, dim)");
  check_tensor(op, "ids", ids, ctx, DType::kI64, -1, "");
  TANDEM_CHECK(ids.rank() < Shape::kMaxRank, ErrorCode::kInvalidArgument,
               "{}: ids of rank {} leave no room for the vector dimension", op, ids.rank());
  std::vector<int64_t> dims(ids.shape().dims().begin(), ids.shape().dims().end());
  dims.push_back(weight.dim(1));
  Tensor y = Tensor::empty(Shape(std::span<const int64_t>(dims)), DType::kF32, ctx.device());
  if (ids.numel() > 0) entry(table(ctx).embedding_forward, op, ctx)(ctx, weight, ids, y);
  return y;
}

Tensor embedding_backward(Ctx& ctx, const Tensor& ids, const Tensor& dy, int64_t num_embeddings) {
  constexpr std::string_view op = "embedding_backward";
  check_tensor(op, "ids", ids, ctx, DType::kI64, -1, "");
  check_tensor(op, "dy", dy, ctx, DType::kF32, ids.rank() + 1, "(ids..., dim)");
  Tensor dw = Tensor::empty({num_embeddings, dy.dim(dy.rank() - 1)}, DType::kF32, ctx.device());
  entry(table(ctx).embedding_backward, op, ctx)(ctx, ids, dy, dw);
  return dw;
}

}  // namespace tandem::backend
