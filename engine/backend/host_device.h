// TANDEM_HOST_DEVICE marks inline arithmetic that both the CPU kernels and the CUDA kernels run
// (optim_math.h, loss_math.h), so the CPU tests prove the formulas the GPU computes. This header
// is the one place outside engine/backend/cuda allowed to test for the CUDA compiler
// (tools/scripts/check_layering.sh names it): it switches an attribute, never a code path.
#pragma once

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif
