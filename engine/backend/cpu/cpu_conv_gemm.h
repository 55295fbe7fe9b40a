// Convolutions on small planes as matrix products: the input's patches copied into the rows of a
// matrix (im2col), one oneDNN matmul per pass, and for the backward data the patches' gradients
// added back into the image (col2im). oneDNN 2.6's direct kernels spread a convolution over its
// output plane and crawl where that plane has a few pixels and the weights are large (ResNet-18's
// 512 channels at 2x2: 33 GFLOP/s for the bf16 weight gradient); as one matmul of M = N*OH*OW rows
// the same work runs on its GEMM kernels (AMX or AVX-512) at full speed.
#pragma once

#include "engine/backend/kernels.h"

namespace tandem::backend::cpu {

// Whether the matmul form suits a convolution of x (N, C, H, W) by w (K, C, R, S) into y: one
// group, channels_last activations on both sides (the rows of the patch matrix are then runs of
// channels), and an output plane small enough for the direct kernels to be slower (measured in
// ResNet-18's step: docs/PERFORMANCE.md).
bool conv_gemm_suits(const Conv2dParams& p, const Tensor& x, const Shape& w, const Tensor& y);

// The three passes; add: dx += the result. x and dy may be f32 or bf16 (a caller's bf16_operand);
// under precision: bf16 the products read bf16 and accumulate and write f32.
void conv_gemm_forward(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                       Tensor& y);
void conv_gemm_backward_data(Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w, Tensor& dx,
                             bool add);
void conv_gemm_backward_weights(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& dy, Tensor& dw,
                                Tensor& db);

}  // namespace tandem::backend::cpu
