# Finds the Debian packages DESIGN.md lists; nothing is downloaded at build time.
# tools/scripts/install_deps.sh installs whatever is missing.

find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json REQUIRED)
# Debian's dnnl-config.cmake insists on OpenCL (its GPU runtime), which the CPU backend does
# not use: find the library and header directly instead.
find_library(TANDEM_DNNL_LIBRARY NAMES dnnl REQUIRED)
find_path(TANDEM_DNNL_INCLUDE_DIR NAMES dnnl.hpp REQUIRED)
add_library(DNNL::dnnl UNKNOWN IMPORTED)
set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION ${TANDEM_DNNL_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${TANDEM_DNNL_INCLUDE_DIR})
find_package(OpenMP REQUIRED)
find_package(ZLIB REQUIRED)
find_package(Protobuf REQUIRED)
# ONNX's own protobuf schema, checker and shape inference, for ONNX export (Debian's libonnx-dev).
find_package(ONNX REQUIRED)
find_package(CLI11 REQUIRED)
# Gloo (libgloo-dev): the collectives between processes of a multi-process CPU run. Without it
# everything else builds; a run of several processes then says what to install.
set(TANDEM_HAVE_GLOO OFF)
if(TANDEM_WITH_GLOO)
  find_package(Gloo CONFIG QUIET)
  if(TARGET gloo)
    set(TANDEM_HAVE_GLOO ON)
  else()
    message(WARNING "Gloo not found (apt-get install libgloo-dev): multi-process runs are off in this build")
  endif()
endif()
if(TANDEM_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TANDEM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# CUDA: the toolkit where CUDA_HOME points (or nvcc on PATH). Without it the CUDA
# plugin is skipped and everything else builds and runs on the CPU.
if(TANDEM_WITH_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    if(DEFINED ENV{CUDA_HOME} AND EXISTS "$ENV{CUDA_HOME}/bin/nvcc")
      set(CMAKE_CUDA_COMPILER "$ENV{CUDA_HOME}/bin/nvcc")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Machine code for Turing (7.5), Ampere (8.0, which 8.6 and Ada's 8.9 run as is) and Hopper (9.0),
      # plus Hopper's PTX for newer cards to compile at load time. A cubin runs on every later minor
      # version of its major, so 8.6 needs none of its own: each architecture listed costs the build
      # (CI's included) a full device compile of every kernel.
      set(CMAKE_CUDA_ARCHITECTURES 75-real 80-real 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 knows no C++20 flag for nvcc (its table stops at 17), and our .cu files include the
    # engine's C++20 headers; nvcc 12 and newer take -std=c++20.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(TANDEM_HAVE_CUDA ON)
    message(STATUS "Tandem: CUDA ${CUDAToolkit_VERSION} at ${CUDAToolkit_LIBRARY_ROOT}; building the CUDA plugin")
  else()
    set(TANDEM_HAVE_CUDA OFF)
    message(STATUS "Tandem: no CUDA toolkit found (set CUDA_HOME); the CUDA plugin is not built")
  endif()
else()
  set(TANDEM_HAVE_CUDA OFF)
endif()
