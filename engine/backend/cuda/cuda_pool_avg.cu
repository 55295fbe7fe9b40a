// Average pooling backward by gathering (see cuda_pool_avg.h). Output sizes follow the floor
// rule, and padding is at most half the kernel (ops.cpp checks), so every window has at least
// one cell inside the image and never reaches past the padded border.
#include "engine/backend/cuda/cuda_pool_avg.h"

namespace tandem::backend::cuda {
namespace {

// The first and last output index along one axis whose window covers input index i.
__device__ void covering_range(int64_t i, int64_t kernel, int64_t stride, int64_t pad, int64_t out, int64_t& lo,
                               int64_t& hi) {
  // Window o spans [o * stride - pad, o * stride - pad + kernel).
  int64_t shifted = i + pad;
  lo = shifted < kernel ? 0 : (shifted - kernel) / stride + 1;
  hi = shifted / stride;
  if (hi > out - 1) hi = out - 1;
}

// Cells of window o along one axis that lie inside [0, size).
__device__ int64_t inside(int64_t o, int64_t kernel, int64_t stride, int64_t pad, int64_t size) {
  int64_t start = o * stride - pad;
  int64_t end = start + kernel;
  if (start < 0) start = 0;
  if (end > size) end = size;
  return end - start;
}

__global__ void avg_pool2d_backward_kernel(AvgPoolGeometry g, const float* dy, float* dx, int64_t total) {
  int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    // Physical index -> logical (n, c, ih, iw).
    int64_t n, c, ih, iw, t;
    if (g.channels_last) {
      c = i % g.c;
      t = i / g.c;
      iw = t % g.w;
      t /= g.w;
      ih = t % g.h;
      n = t / g.h;
    } else {
      iw = i % g.w;
      t = i / g.w;
      ih = t % g.h;
      t /= g.h;
      c = t % g.c;
      n = t / g.c;
    }
    int64_t oh_lo, oh_hi, ow_lo, ow_hi;
    covering_range(ih, g.kernel_h, g.stride_h, g.pad_h, g.out_h, oh_lo, oh_hi);
    covering_range(iw, g.kernel_w, g.stride_w, g.pad_w, g.out_w, ow_lo, ow_hi);
    float whole = static_cast<float>(g.kernel_h * g.kernel_w);
    float sum = 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi; ++oh) {
      int64_t rows = g.count_include_pad ? 0 : inside(oh, g.kernel_h, g.stride_h, g.pad_h, g.h);
      for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
        int64_t at = g.channels_last ? ((n * g.out_h + oh) * g.out_w + ow) * g.c + c
                                     : ((n * g.c + c) * g.out_h + oh) * g.out_w + ow;
        float count = g.count_include_pad
                          ? whole
                          : static_cast<float>(rows * inside(ow, g.kernel_w, g.stride_w, g.pad_w, g.w));
        sum += dy[at] / count;
      }
    }
    dx[i] = sum;
  }
}

}  // namespace

void launch_avg_pool2d_backward(const AvgPoolGeometry& g, const float* dy, float* dx, unsigned blocks,
                                unsigned threads, cudaStream_t stream) {
  int64_t total = g.n * g.c * g.h * g.w;
  if (total == 0) return;
  avg_pool2d_backward_kernel<<<blocks, threads, 0, stream>>>(g, dy, dx, total);
}

}  // namespace tandem::backend::cuda
