/* A stand-in libcudnn reporting FAKE_CUDNN_VERSION, built for CUDA FAKE_CUDNN_CUDART. */
#include <stddef.h>
size_t cudnnGetVersion(void) { return FAKE_CUDNN_VERSION; }
size_t cudnnGetCudartVersion(void) { return FAKE_CUDNN_CUDART; }
