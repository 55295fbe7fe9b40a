// RAII owners of cuDNN descriptors, for the per-context plan caches of the convolution, batch norm
// and pooling kernels. Destroying one only frees host memory and cannot fail in a way a destructor
// could act on, so its status is not checked.
#pragma once

#include <cudnn.h>

#include "engine/backend/cuda/cuda_check.h"

namespace tandem::backend::cuda {

template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { tandem::cuda::check_cudnn(Create(&handle_), "cudnnCreate*Descriptor", "for a kernel plan"); }
  ~CudnnDescriptor() { Destroy(handle_); }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  T get() const { return handle_; }

 private:
  T handle_{};
};

using TensorDescriptor = CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                                         cudnnDestroyTensorDescriptor>;
using FilterDescriptor = CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                                         cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor = CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                              cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor = CudnnDescriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                                          cudnnDestroyPoolingDescriptor>;
using ActivationDescriptor = CudnnDescriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                                             cudnnDestroyActivationDescriptor>;

}  // namespace tandem::backend::cuda
