// The checked entry points of ops.h for the transformer's ops: layer normalisation, batched
// matrix products with broadcast batch dimensions, scaled dot-product attention and embedding.
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
                                    const Tensor& beta, float eps) {
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
  LayerNormForward out{Tensor::empty(x.shape(), DType::kF32, ctx.device()),
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
