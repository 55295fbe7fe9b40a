// Training batch norm over channels_last f32 activations whose channel count is a multiple of 16,
// in AVX-512 and in as few passes over the activations as the math allows: forward reads x once
// for the moments and once to normalise (adding a residual shortcut and clipping at 0 in that same
// pass when asked); backward reads x and dy once for the two sums and once for dx. oneDNN 2.6's
// bnorm_jit reads x three times forward and cannot add a shortcut. cpu_batchnorm.cpp sends every
// other case (NCHW, other channel counts, a CPU without AVX-512, inference) to oneDNN.
#pragma once

#include "engine/backend/kernels.h"

namespace tandem::backend::cpu {

// True when x is a 4-D channels_last f32 tensor with a multiple of 16 channels and this CPU runs
// AVX-512F. The forward and the backward of one layer decide alike, by x alone.
bool avx512_batchnorm_suits(const Tensor& x);

// y = bn(x) (+ shortcut, when given), clipped at 0 under p.fuse_relu or with a shortcut, with the
// batch statistics; running averages updated with the unbiased variance. y = (x - mean) scale +
// beta with scale = gamma invstd; saved.workspace keeps scale and beta, from which backward
// recomputes the ReLU's mask bit for bit without reading y.
void avx512_batchnorm_training(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor* shortcut, Tensor& running_mean,
                               Tensor& running_var, Tensor& y, BatchNormSaved& saved);

// dx, dgamma, dbeta of the forward above without a shortcut (dy masked by its ReLU under
// p.fuse_relu).
void avx512_batchnorm_backward(Ctx& ctx, const BatchNormParams& p, const Tensor& x, const Tensor& dy,
                               const Tensor& gamma, const BatchNormSaved& saved, Tensor& dx, Tensor& dgamma,
                               Tensor& dbeta);

}  // namespace tandem::backend::cpu
