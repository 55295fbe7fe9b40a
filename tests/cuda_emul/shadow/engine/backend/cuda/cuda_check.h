// Shadow of engine/backend/cuda/cuda_check.h for the emulator build: the same macros, checking the
// emulated runtime's status (the real header needs cuBLAS and cuDNN). The format arguments are
// still formatted, so that fmt checks them against their format strings as in the real build.
#pragma once

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <string>

namespace tandem_emul {

inline void check_status(cudaError_t status, const char* call, const std::string& values) {
  if (status != cudaSuccess) fatal(call, values.c_str());
}

}  // namespace tandem_emul

#define TANDEM_CUDA_CHECK(call, ...) ::tandem_emul::check_status((call), #call, fmt::format(__VA_ARGS__))
#define TANDEM_CUDA_LAUNCH_CHECK(kernel, ...) \
  ::tandem_emul::check_status(cudaGetLastError(), kernel, fmt::format(__VA_ARGS__))
