// The fused classifier's loss-and-gradient pass over a chunk of rows, in place (KernelTable::
// softmax_cross_entropy_inplace). Apart from cuda_loss.cu so that the CPU emulator (tests/cuda_emul)
// runs its source: it includes nothing but the runtime, the reductions and loss_math.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::backend::cuda {

struct XentInplaceArgs {
  float* logits;  // (rows, classes), overwritten by scale * (softmax - target); 0 on an ignored row
  const int64_t* labels;
  int64_t rows, classes;
  float smoothing;
  int64_t ignore_index;
  float scale;
  float* loss;  // (rows); NaN (and a NaN row of gradients) for a label outside [0, classes)
};

// Launches on `stream`; a launch failure throws, naming the kernel and the sizes (cuda_check.h).
void launch_softmax_xent_inplace(const XentInplaceArgs& a, cudaStream_t stream);

}  // namespace tandem::backend::cuda
