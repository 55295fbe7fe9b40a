# Writes engine/backend/doctor/cuda_build_info.h into the build tree: the CUDA stack Tandem was
# built against (toolkit, cuDNN, cuBLAS, NCCL versions read from their headers here, at configure
# time), the GPU architectures our kernels target and where the plugin is built. engine/backend
# outside cuda/ may not include CUDA headers, so the doctor learns these numbers from this file.
set(TANDEM_BI_CUDA_BUILT false)
set(TANDEM_BI_CUDA_VERSION 0)
set(TANDEM_BI_CUDA_TEXT "")
set(TANDEM_BI_CUDNN 0)
set(TANDEM_BI_CUBLAS 0)
set(TANDEM_BI_NCCL 0)
set(TANDEM_BI_ARCHS "")
set(TANDEM_BI_PLUGIN "")
set(TANDEM_BI_LIBDIR "")

# Reads `#define NAME value` for each NAME from a header; sets <prefix>_<NAME>, or 0 when absent.
function(tandem_read_defines header prefix)
  foreach(name ${ARGN})
    set(value 0)
    if(EXISTS ${header})
      file(STRINGS ${header} line REGEX "^#define ${name} +[0-9]+")
      if(line)
        string(REGEX REPLACE "^#define ${name} +([0-9]+).*" "\\1" value "${line}")
      endif()
    endif()
    set(${prefix}_${name} ${value} PARENT_SCOPE)
  endforeach()
endfunction()

if(TANDEM_HAVE_CUDA)
  set(TANDEM_BI_CUDA_BUILT true)
  math(EXPR TANDEM_BI_CUDA_VERSION "${CUDAToolkit_VERSION_MAJOR} * 1000 + ${CUDAToolkit_VERSION_MINOR} * 10")
  set(TANDEM_BI_CUDA_TEXT ${CUDAToolkit_VERSION})
  set(inc ${CUDAToolkit_INCLUDE_DIRS})
  list(GET inc 0 inc)
  tandem_read_defines(${inc}/cudnn_version.h bi CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL)
  math(EXPR TANDEM_BI_CUDNN "${bi_CUDNN_MAJOR} * 10000 + ${bi_CUDNN_MINOR} * 100 + ${bi_CUDNN_PATCHLEVEL}")
  tandem_read_defines(${inc}/cublas_api.h bi CUBLAS_VER_MAJOR CUBLAS_VER_MINOR CUBLAS_VER_PATCH)
  math(EXPR TANDEM_BI_CUBLAS "${bi_CUBLAS_VER_MAJOR} * 10000 + ${bi_CUBLAS_VER_MINOR} * 100 + ${bi_CUBLAS_VER_PATCH}")
  tandem_read_defines(${inc}/nccl.h bi NCCL_MAJOR NCCL_MINOR NCCL_PATCH)
  math(EXPR TANDEM_BI_NCCL "${bi_NCCL_MAJOR} * 10000 + ${bi_NCCL_MINOR} * 100 + ${bi_NCCL_PATCH}")
  string(REPLACE ";" " " TANDEM_BI_ARCHS "${CMAKE_CUDA_ARCHITECTURES}")
  set(TANDEM_BI_PLUGIN ${PROJECT_BINARY_DIR}/engine/backend/cuda/libtandem_cuda.so)
  set(TANDEM_BI_LIBDIR ${CUDAToolkit_LIBRARY_DIR})
endif()

configure_file(${PROJECT_SOURCE_DIR}/engine/backend/doctor/cuda_build_info.h.in
  ${PROJECT_BINARY_DIR}/engine/backend/doctor/cuda_build_info.h @ONLY)
