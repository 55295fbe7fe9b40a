// Shared helpers of the backend tests: random data, tensors from and to double vectors,
// error measures, central finite differences, and plain double-precision reference kernels
// (naive loops over logical N, C, H, W order) that every CPU kernel is compared with.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/backend/ops.h"

namespace tandem::backend::testing {

using Vec = std::vector<double>;

// n values uniform in [lo, hi), each exactly representable as a float, so the f32 kernels
// and the double references see the same inputs.
Vec random_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);
Tensor to_tensor(const Vec& v, const Shape& shape, MemoryFormat format = MemoryFormat::kContiguous);
Vec to_vec(const Tensor& t);  // logical order whatever the format

// max |got - want| / max |want|: the relative error of the worst element.
double rel_error(const Vec& got, const Vec& want);
// ||got - want|| / ||want||.
double rel_norm_error(const Vec& got, const Vec& want);
double dot(const Vec& a, const Vec& b);

// d/dx sum(r * f(x)) by central differences, in double.
Vec fd_gradient(const std::function<Vec(const Vec&)>& f, const Vec& x, const Vec& r, double h = 1e-5);

int64_t numel(const Shape& s);

// Convolution: x (N, C, H, W), w (K, C/groups, R, S), b (K) or empty -> y (N, K, P, Q).
Vec conv2d_ref(const Conv2dParams& p, const Vec& x, const Shape& xs, const Vec& w, const Shape& ws, const Vec& b);
Vec conv2d_backward_data_ref(const Conv2dParams& p, const Vec& dy, const Vec& w, const Shape& ws, const Shape& xs);
Vec conv2d_backward_weights_ref(const Conv2dParams& p, const Vec& x, const Shape& xs, const Vec& dy,
                                const Shape& ws);

// Pooling (padding never wins a max; average over the window, with or without the padding).
Vec max_pool_ref(const Pool2dParams& p, const Vec& x, const Shape& xs);
Vec avg_pool_ref(const Pool2dParams& p, const Vec& x, const Shape& xs);
Vec max_pool_backward_ref(const Pool2dParams& p, const Vec& x, const Shape& xs, const Vec& dy);
Vec avg_pool_backward_ref(const Pool2dParams& p, const Vec& dy, const Shape& xs);

// Batch norm in training mode with batch statistics.
struct BatchNormRef {
  Vec y, mean, var;  // var biased
};
BatchNormRef batchnorm_ref(const Vec& x, const Shape& xs, const Vec& gamma, const Vec& beta, double eps, bool relu);
struct BatchNormGradsRef {
  Vec dx, dgamma, dbeta;
};
BatchNormGradsRef batchnorm_backward_ref(const Vec& x, const Shape& xs, const Vec& gamma, const Vec& beta,
                                         const Vec& dy, double eps, bool relu);

// (M, K) a times (K, N) b.
Vec matmul_ref(const Vec& a, const Vec& b, int64_t m, int64_t k, int64_t n);
Vec transpose(const Vec& a, int64_t rows, int64_t cols);

// Per-example loss and softmax probabilities of (N, K) logits.
struct SoftmaxRef {
  Vec loss, probs;
};
SoftmaxRef softmax_cross_entropy_ref(const Vec& logits, const std::vector<int64_t>& labels, int64_t k, double s);

// Runs f and checks it throws tandem::Error with code and every one of parts in its message.
void expect_error(const std::function<void()>& f, ErrorCode code, const std::vector<std::string>& parts);

}  // namespace tandem::backend::testing
