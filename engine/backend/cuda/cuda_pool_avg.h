// Average pooling's backward pass as our own kernel (cuda_pool_avg.cu): the op gets only dy and
// dx, and a gather (each dx element sums the windows that cover it) needs neither x nor y, writes
// every dx element exactly once and adds in a fixed order, so it is deterministic without atomics.
// Plain values and pointers, so the .cu file includes no engine headers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::backend::cuda {

struct AvgPoolGeometry {
  int64_t n, c, h, w;        // dx (logical N, C, H, W)
  int64_t out_h, out_w;      // dy's plane
  int64_t kernel_h, kernel_w;
  int64_t stride_h, stride_w;
  int64_t pad_h, pad_w;
  bool count_include_pad;    // divide by the whole window, else by its cells inside the image
  bool channels_last;        // both dy and dx are NHWC in memory, else NCHW
};

void launch_avg_pool2d_backward(const AvgPoolGeometry& g, const float* dy, float* dx, unsigned blocks,
                                unsigned threads, cudaStream_t stream);

}  // namespace tandem::backend::cuda
