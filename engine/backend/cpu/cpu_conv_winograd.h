// Winograd convolutions on the CPU: oneDNN's F(4x4, 3x3) kernels (jit_wino_4x3, AVX-512) for the
// 3x3, stride-1 convolutions with enough channels, where they do a quarter of the direct kernels'
// multiplications. They read and write only the blocked nChw16c layout, so the activations are
// reordered in and out around them; at the shapes chosen here that costs a small part of the gain.
#pragma once

#include "engine/backend/kernels.h"

namespace tandem::backend::cpu {

// Whether the Winograd kernel makes a training step faster for a convolution of input x by w, as
// measured inside ResNet-20's and ResNet-18's steps (docs/PERFORMANCE.md): 3x3, stride 1, no
// dilation, one group, padding 0 or 1, channels in and out multiples of 16, an output plane of 4x4
// or more (below, most of each 4x4 tile is wasted), and at least 128 channels, or 64 on planes of
// 8x8 or more. With 16 and 32 channels, and 64 at 7x7, the step got no faster or slower, even
// where the kernel alone was faster.
bool winograd_suits(const Conv2dParams& p, const Shape& x, const Shape& w);

// Each runs the pass through the Winograd kernel and returns true, or returns false having done
// nothing when this oneDNN offers no Winograd kernel for it (no AVX-512, say): the caller then
// runs the direct one. add: dx += the result.
bool winograd_forward(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                      Tensor& y);
bool winograd_backward_data(Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w, Tensor& dx,
                            bool add);
bool winograd_backward_weights(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& dy, Tensor& dw,
                               Tensor& db);

}  // namespace tandem::backend::cpu
