// Plain double-precision references of the N-D and transformer ops (logical row-major order),
// which the CPU kernels are compared with here and the CUDA kernels through them.
#pragma once

#include <vector>

#include "tests/backend/backend_test_util.h"

namespace tandem::backend::testing {

std::vector<int64_t> strides_of(const Shape& s);
Vec permute_ref(const Vec& x, const Shape& xs, const std::vector<int>& perm);
Vec expand_ref(const Vec& x, const Shape& xs, const Shape& out);  // NumPy broadcast, aligned right
double binary_ref(BinaryOp op, double a, double b);
double unary_ref(UnaryOp op, double x);
double unary_grad_ref(UnaryOp op, double x);  // f'(x)
// One dimension reduced, kept with size 1.
Vec reduce_ref(Reduction r, const Vec& x, const Shape& xs, int axis);
Vec softmax_ref(const Vec& x, const Shape& xs, int axis, bool log);
// (rows, n) rows normalised; gamma and beta empty when absent.
Vec layer_norm_ref(const Vec& x, int64_t rows, int64_t n, const Vec& gamma, const Vec& beta, double eps);
// (B, H, Tq, D) q, (B, H, Tk, D) k, (B, H, Tk, Dv) v, mask (B*H, Tq, Tk) expanded or empty;
// the naive softmax(q k^T scale + mask) v with the causal rule of attention_math.h.
struct AttentionShape {
  int64_t b, h, tq, tk, d, dv;
};
Vec attention_ref(const AttentionShape& s, const Vec& q, const Vec& k, const Vec& v, const Vec& mask, double scale,
                  bool causal);

}  // namespace tandem::backend::testing
