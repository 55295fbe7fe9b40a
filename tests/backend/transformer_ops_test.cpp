// The transformer's ops on the CPU backend against double references: layer normalisation (with
// and without weight and bias) and its backward, batched matmul with broadcast batches and
// transposes, scaled dot-product attention (causal, masked, Tq != Tk, blocks of the tiled kernel
// crossed, dropout) and its backward against finite differences, embedding, and cross-entropy's
// ignore_index.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/backend/attention_math.h"
#include "tests/backend/backend_test_util.h"
#include "tests/backend/nd_ref_util.h"

namespace tandem::backend::testing {
namespace {

class TransformerOpsTest : public ::testing::Test {
 protected:
  ExecutionContext ctx_{Device::cpu(), 2, 1};
};

TEST_F(TransformerOpsTest, LayerNormAndItsBackwardMatchTheReference) {
  const Shape s{2, 3, 10};
  const int64_t rows = 6, n = 10;
  Vec x = random_vec(static_cast<size_t>(s.numel()), 1, -2.0, 2.0);
  Vec g = random_vec(static_cast<size_t>(n), 2, 0.5, 1.5), b = random_vec(static_cast<size_t>(n), 3);
  Vec r = random_vec(x.size(), 4);
  const double eps = 1e-5;
  for (int variant = 0; variant < 3; ++variant) {  // weight and bias; weight only; neither
    Vec gv = variant < 2 ? g : Vec(), bv = variant < 1 ? b : Vec();
    Tensor gt = gv.empty() ? Tensor() : to_tensor(gv, {n}), bt = bv.empty() ? Tensor() : to_tensor(bv, {n});
    LayerNormForward f = layer_norm_forward(ctx_, to_tensor(x, s), 1, gt, bt, static_cast<float>(eps));
    EXPECT_LT(rel_error(to_vec(f.y), layer_norm_ref(x, rows, n, gv, bv, eps)), 1e-5) << variant;
    LayerNormGrads d = layer_norm_backward(ctx_, to_tensor(x, s), to_tensor(r, s), gt, !bv.empty(), f.mean, f.var,
                                           static_cast<float>(eps));
    Vec fdx = fd_gradient([&](const Vec& v) { return layer_norm_ref(v, rows, n, gv, bv, eps); }, x, r);
    EXPECT_LT(rel_error(to_vec(d.dx), fdx), 1e-4) << variant;
    if (!gv.empty()) {
      Vec fdg = fd_gradient([&](const Vec& v) { return layer_norm_ref(x, rows, n, v, bv, eps); }, gv, r);
      EXPECT_LT(rel_error(to_vec(d.dweight), fdg), 1e-4) << variant;
    }
    if (!bv.empty()) {
      Vec fdb = fd_gradient([&](const Vec& v) { return layer_norm_ref(x, rows, n, gv, v, eps); }, bv, r);
      EXPECT_LT(rel_error(to_vec(d.dbias), fdb), 1e-4) << variant;
    }
  }
}

TEST_F(TransformerOpsTest, BatchedMatmulBroadcastsBatchesAndTransposes) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  for (const Case& c : {Case{{2, 3, 4, 5}, {5, 6}, false, false}, Case{{3, 4, 5}, {3, 5, 2}, false, false},
                        Case{{1, 4, 5}, {3, 5, 2}, false, false}, Case{{3, 5, 4}, {3, 2, 5}, true, true},
                        Case{{2, 1, 4, 5}, {1, 3, 5, 2}, false, false}, Case{{4, 5}, {2, 6, 5}, false, true}}) {
    Vec a = random_vec(static_cast<size_t>(c.a.numel()), 5), b = random_vec(static_cast<size_t>(c.b.numel()), 6);
    Tensor out = matmul_nd(ctx_, to_tensor(a, c.a), to_tensor(b, c.b), c.ta, c.tb);
    // Reference: expand both to the broadcast batch, then one matrix product per batch entry.
    const int ra = c.a.rank(), rb = c.b.rank();
    const int64_t m = c.ta ? c.a[ra - 1] : c.a[ra - 2], k = c.ta ? c.a[ra - 2] : c.a[ra - 1];
    const int64_t n = c.tb ? c.b[rb - 2] : c.b[rb - 1];
    const Shape batch = broadcast_shapes("ref", Shape(std::span<const int64_t>(c.a.dims().begin(), ra - 2)),
                                         Shape(std::span<const int64_t>(c.b.dims().begin(), rb - 2)));
    std::vector<int64_t> ad(batch.dims().begin(), batch.dims().end()), bd = ad;
    ad.insert(ad.end(), {c.a[ra - 2], c.a[ra - 1]});
    bd.insert(bd.end(), {c.b[rb - 2], c.b[rb - 1]});
    Vec ea = expand_ref(a, c.a, Shape(ad)), eb = expand_ref(b, c.b, Shape(bd));
    Vec want;
    for (int64_t i = 0; i < batch.numel(); ++i) {
      Vec am(ea.begin() + i * m * k, ea.begin() + (i + 1) * m * k), bm(eb.begin() + i * k * n, eb.begin() + (i + 1) * k * n);
      if (c.ta) am = transpose(am, k, m);
      if (c.tb) bm = transpose(bm, n, k);
      Vec cm = matmul_ref(am, bm, m, k, n);
      want.insert(want.end(), cm.begin(), cm.end());
    }
    EXPECT_LT(rel_error(to_vec(out), want), 1e-5) << c.a.str() << " x " << c.b.str();
  }
}

struct AttnCase {
  AttentionShape s;
  bool causal, mask;
  float dropout;
};

// The reference with a fixed dropout mask: the kept probabilities scaled by 1 / (1 - p).
Vec attention_with_dropout_ref(const AttentionShape& s, const Vec& q, const Vec& k, const Vec& v, const Vec& mask,
                               double scale, bool causal, float p, uint64_t seed) {
  if (p == 0.0f) return attention_ref(s, q, k, v, mask, scale, causal);
  // softmax(...) first, then dropout on the probabilities: expressed as attention with v per query.
  Vec y(static_cast<size_t>(s.b * s.h * s.tq * s.dv), 0.0);
  for (int64_t bh = 0; bh < s.b * s.h; ++bh) {
    for (int64_t i = 0; i < s.tq; ++i) {
      // Probabilities of this query from a one-hot value matrix.
      AttentionShape one{1, 1, 1, s.tk, s.d, s.tk};
      Vec qi(q.begin() + (bh * s.tq + i) * s.d, q.begin() + (bh * s.tq + i + 1) * s.d);
      Vec ki(k.begin() + bh * s.tk * s.d, k.begin() + (bh + 1) * s.tk * s.d);
      Vec eye(static_cast<size_t>(s.tk * s.tk), 0.0);
      for (int64_t j = 0; j < s.tk; ++j) eye[static_cast<size_t>(j * s.tk + j)] = 1.0;
      Vec mi;
      if (!mask.empty()) mi.assign(mask.begin() + (bh * s.tq + i) * s.tk, mask.begin() + (bh * s.tq + i + 1) * s.tk);
      // Causality depends on i's place among tq queries: shift the single query's index by a mask.
      if (causal) {
        if (mi.empty()) mi.assign(static_cast<size_t>(s.tk), 0.0);
        for (int64_t j = 0; j < s.tk; ++j) {
          if (j > attention_math::last_visible_key(i, s.tq, s.tk)) mi[static_cast<size_t>(j)] = -INFINITY;
        }
      }
      Vec probs = attention_ref(one, qi, ki, eye, mi, scale, false);
      for (int64_t j = 0; j < s.tk; ++j) {
        const bool kept = attention_math::kept(seed, p, bh, i, j, s.tq, s.tk);
        const double pj = kept ? probs[static_cast<size_t>(j)] / (1.0 - p) : 0.0;
        for (int64_t c = 0; c < s.dv; ++c) {
          y[static_cast<size_t>((bh * s.tq + i) * s.dv + c)] += pj * v[static_cast<size_t>((bh * s.tk + j) * s.dv + c)];
        }
      }
    }
  }
  return y;
}

TEST_F(TransformerOpsTest, AttentionMatchesTheNaiveSoftmaxAcrossTiles) {
  for (const AttnCase& c : {AttnCase{{2, 3, 70, 70, 24, 24}, true, false, 0.0f},
                            AttnCase{{1, 2, 65, 300, 16, 8}, false, true, 0.0f},
                            AttnCase{{1, 1, 5, 300, 8, 8}, true, true, 0.0f},
                            AttnCase{{2, 2, 9, 9, 8, 8}, true, false, 0.3f}}) {
    const AttentionShape& s = c.s;
    Vec q = random_vec(static_cast<size_t>(s.b * s.h * s.tq * s.d), 11, -2.0, 2.0);
    Vec k = random_vec(static_cast<size_t>(s.b * s.h * s.tk * s.d), 12, -2.0, 2.0);
    Vec v = random_vec(static_cast<size_t>(s.b * s.h * s.tk * s.dv), 13);
    Vec mask_h;  // (1, H, Tq, Tk): broadcast over the batch
    Tensor mask;
    if (c.mask) {
      mask_h = random_vec(static_cast<size_t>(s.h * s.tq * s.tk), 14, -2.0, 2.0);
      mask = to_tensor(mask_h, {1, s.h, s.tq, s.tk});
    }
    Vec mask_full = c.mask ? expand_ref(mask_h, {1, s.h, s.tq, s.tk}, {s.b, s.h, s.tq, s.tk}) : Vec();
    AttentionParams p{.scale = 0.3f, .causal = c.causal, .dropout_p = c.dropout, .dropout_seed = 99};
    AttentionForward f = attention_forward(ctx_, p, to_tensor(q, {s.b, s.h, s.tq, s.d}),
                                           to_tensor(k, {s.b, s.h, s.tk, s.d}), to_tensor(v, {s.b, s.h, s.tk, s.dv}),
                                           mask);
    Vec want = attention_with_dropout_ref(s, q, k, v, mask_full, 0.3, c.causal, c.dropout, 99);
    EXPECT_LT(rel_error(to_vec(f.y), want), 1e-5) << s.tq << "x" << s.tk << " causal " << c.causal;
  }
}

TEST_F(TransformerOpsTest, AttentionBackwardMatchesFiniteDifferences) {
  for (const AttnCase& c : {AttnCase{{1, 2, 5, 5, 3, 3}, true, false, 0.0f},
                            AttnCase{{2, 1, 4, 6, 3, 2}, false, true, 0.0f},
                            AttnCase{{1, 2, 4, 4, 3, 3}, true, false, 0.25f}}) {
    const AttentionShape& s = c.s;
    const Shape qs{s.b, s.h, s.tq, s.d}, ks{s.b, s.h, s.tk, s.d}, vs{s.b, s.h, s.tk, s.dv};
    Vec q = random_vec(static_cast<size_t>(qs.numel()), 21), k = random_vec(static_cast<size_t>(ks.numel()), 22);
    Vec v = random_vec(static_cast<size_t>(vs.numel()), 23);
    Vec mask_full = c.mask ? random_vec(static_cast<size_t>(s.b * s.h * s.tq * s.tk), 24) : Vec();
    Tensor mask = c.mask ? to_tensor(mask_full, {s.b, s.h, s.tq, s.tk}) : Tensor();
    AttentionParams p{.scale = 0.7f, .causal = c.causal, .dropout_p = c.dropout, .dropout_seed = 5};
    Tensor qt = to_tensor(q, qs), kt = to_tensor(k, ks), vt = to_tensor(v, vs);
    AttentionForward f = attention_forward(ctx_, p, qt, kt, vt, mask);
    Vec r = random_vec(static_cast<size_t>(f.y.numel()), 25);
    AttentionGrads g = attention_backward(ctx_, p, qt, kt, vt, mask, f.y, f.lse, to_tensor(r, f.y.shape()));
    auto ref = [&](const Vec& qq, const Vec& kk, const Vec& vv) {
      return attention_with_dropout_ref(s, qq, kk, vv, mask_full, 0.7, c.causal, c.dropout, 5);
    };
    EXPECT_LT(rel_error(to_vec(g.dq), fd_gradient([&](const Vec& x) { return ref(x, k, v); }, q, r)), 1e-4);
    EXPECT_LT(rel_error(to_vec(g.dk), fd_gradient([&](const Vec& x) { return ref(q, x, v); }, k, r)), 1e-4);
    EXPECT_LT(rel_error(to_vec(g.dv), fd_gradient([&](const Vec& x) { return ref(q, k, x); }, v, r)), 1e-4);
  }
}

TEST_F(TransformerOpsTest, AQueryThatSeesNoKeyGetsZerosNotNaN) {
  // Causal with more queries than keys: the first Tq - Tk queries see nothing.
  AttentionParams p{.scale = 1.0f, .causal = true};
  Tensor q = to_tensor(random_vec(6 * 2, 31), {1, 1, 6, 2}), k = to_tensor(random_vec(3 * 2, 32), {1, 1, 3, 2});
  Tensor v = to_tensor(random_vec(3 * 2, 33), {1, 1, 3, 2});
  AttentionForward f = attention_forward(ctx_, p, q, k, v);
  Vec y = to_vec(f.y);
  for (int c = 0; c < 6; ++c) EXPECT_EQ(y[static_cast<size_t>(c)], 0.0) << c;
  EXPECT_TRUE(std::isinf(to_vec(f.lse)[0]));
  AttentionGrads g = attention_backward(ctx_, p, q, k, v, Tensor(), f.y, f.lse, Tensor::zeros({1, 1, 6, 2}) );
  for (double d : to_vec(g.dq)) EXPECT_TRUE(std::isfinite(d));
}

TEST_F(TransformerOpsTest, EmbeddingGathersAndSumsRepeatedIds) {
  Vec w = random_vec(5 * 3, 41);
  Tensor ids = Tensor::empty({2, 3}, DType::kI64);
  const int64_t id_values[] = {4, 0, 4, 2, 4, 1};
  std::copy(std::begin(id_values), std::end(id_values), ids.data<int64_t>());
  Tensor y = embedding_forward(ctx_, to_tensor(w, {5, 3}), ids);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 3}));
  Vec yv = to_vec(y);
  for (int i = 0; i < 6; ++i) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(yv[static_cast<size_t>(i * 3 + c)], w[static_cast<size_t>(id_values[i] * 3 + c)]);
  }
  Vec dy = random_vec(18, 42);
  Vec dw = to_vec(embedding_backward(ctx_, ids, to_tensor(dy, {2, 3, 3}), 5));
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(dw[static_cast<size_t>(4 * 3 + c)], dy[static_cast<size_t>(c)] + dy[static_cast<size_t>(6 + c)] + dy[static_cast<size_t>(12 + c)], 1e-6);
    EXPECT_EQ(dw[static_cast<size_t>(3 * 3 + c)], 0.0);
  }
  ids.data<int64_t>()[3] = 5;
  expect_error([&] { embedding_forward(ctx_, to_tensor(w, {5, 3}), ids); }, ErrorCode::kInvalidArgument,
               {"embedding_forward", "id 5 at position 3", "[0, 5)"});
}

TEST_F(TransformerOpsTest, CrossEntropyIgnoresTheIgnoreIndex) {
  Tensor z = to_tensor(random_vec(12, 51), {3, 4});
  Tensor labels = Tensor::empty({3}, DType::kI64);
  labels.data<int64_t>()[0] = 2;
  labels.data<int64_t>()[1] = -100;
  labels.data<int64_t>()[2] = 0;
  SoftmaxCrossEntropyForward f = softmax_cross_entropy_forward(ctx_, z, labels, 0.1f, -100);
  EXPECT_EQ(to_vec(f.loss)[1], 0.0);
  EXPECT_GT(to_vec(f.loss)[0], 0.0);
  Tensor dz = softmax_cross_entropy_backward(ctx_, f.probs, labels, 0.1f, Tensor::from_vector({1, 1, 1}, {3}), -100);
  Vec d = to_vec(dz);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(d[static_cast<size_t>(4 + j)], 0.0);
  expect_error([&] { softmax_cross_entropy_forward(ctx_, z, labels, 0.0f); }, ErrorCode::kInvalidArgument,
               {"labels[1] = -100"});
}

}  // namespace
}  // namespace tandem::backend::testing
