// Version probes for the CUDA runtime, cuDNN, cuBLAS and NCCL. Each entry point used here works
// without a GPU or a driver (checked on a machine with neither): cudaRuntimeGetVersion,
// cudnnGetVersion, cudnnGetCudartVersion, cublasGetProperty, ncclGetVersion.
#include <fmt/format.h>

#include <cstddef>

#include "engine/backend/doctor/cuda_build_info.h"
#include "engine/backend/doctor/probes.h"

namespace tandem::backend::doctor_detail {
namespace {

LibraryReport start(const char* name, const char* soname, const std::string& built_against) {
  LibraryReport report;
  report.name = name;
  report.soname = soname;
  report.built_against = built_against;
  return report;
}

std::string built(int version, std::string (*text)(int)) { return version > 0 ? text(version) : ""; }

// The report, marked not found because a version entry point is missing from the file.
LibraryReport missing_symbol(LibraryReport report, const char* symbol, const std::string& error) {
  report.found = false;
  report.error = fmt::format("{} has no {}: {} (not a real {}?)", report.path, symbol, error, report.soname);
  return report;
}

}  // namespace

bool fill_found(LibraryReport& report, Found& found) {
  report.on_loader_path = found.on_loader_path;
  if (!found.library.loaded()) {
    report.error = found.error;
    return false;
  }
  report.found = true;
  report.path = found.path;
  return true;
}

LibraryReport probe_cuda_runtime(const SearchPolicy& policy) {
  LibraryReport report = start("cuda_runtime", "libcudart.so.13", built(build_info::kCudaVersion, cuda_version_text));
  Found found = find_library(report.soname, policy);
  if (!fill_found(report, found)) {
    Found older = find_library("libcudart.so.12", policy);
    if (older.library.loaded()) report.detail = "found libcudart.so.12 (CUDA 12) at " + older.path;
    older.library.release();
    return report;
  }
  auto get = found.library.function<int (*)(int*)>("cudaRuntimeGetVersion");
  if (get == nullptr) return missing_symbol(report, "cudaRuntimeGetVersion", found.library.error());
  int version = 0;
  if (int status = get(&version); status != 0) report.error = fmt::format("cudaRuntimeGetVersion returned {}", status);
  report.version = version;
  report.version_text = cuda_version_text(version);
  found.library.release();
  return report;
}

LibraryReport probe_cudnn(const SearchPolicy& policy) {
  LibraryReport report = start("cudnn", "libcudnn.so.9", built(build_info::kCudnnVersion, cudnn_version_text));
  Found found = find_library(report.soname, policy);
  bool main_soname = fill_found(report, found);
  if (!main_soname) {
    // cuDNN 8 under its own soname: name it, so "missing" reads as "wrong major" where that is the truth.
    found = find_library("libcudnn.so.8", policy);
    if (!found.library.loaded()) return report;
    report.detail = "found libcudnn.so.8 at " + found.path;
  }
  auto get = found.library.function<size_t (*)()>("cudnnGetVersion");
  auto get_cudart = found.library.function<size_t (*)()>("cudnnGetCudartVersion");
  if (get == nullptr) {
    if (main_soname) report = missing_symbol(report, "cudnnGetVersion", found.library.error());
    return report;
  }
  int version = static_cast<int>(get());
  if (!main_soname) {
    report.detail += fmt::format(" (cuDNN {})", cudnn_version_text(version));
    found.library.release();
    return report;
  }
  report.version = version;
  report.version_text = cudnn_version_text(version);
  if (get_cudart != nullptr) {
    report.detail = "built for CUDA " + cuda_version_text(static_cast<int>(get_cudart()));
  }
  found.library.release();
  return report;
}

LibraryReport probe_cublas(const SearchPolicy& policy) {
  LibraryReport report = start("cublas", "libcublas.so.13", built(build_info::kCublasVersion, triple_version_text));
  Found found = find_library(report.soname, policy);
  if (!fill_found(report, found)) return report;
  // cublasGetProperty(MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2) needs no handle.
  auto get = found.library.function<int (*)(int, int*)>("cublasGetProperty");
  if (get == nullptr) return missing_symbol(report, "cublasGetProperty", found.library.error());
  int part[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    if (int status = get(i, &part[i]); status != 0) report.error = fmt::format("cublasGetProperty({}) returned {}", i, status);
  }
  report.version = part[0] * 10000 + part[1] * 100 + part[2];
  report.version_text = fmt::format("{}.{}.{}", part[0], part[1], part[2]);
  found.library.release();
  return report;
}

LibraryReport probe_nccl(const SearchPolicy& policy) {
  LibraryReport report = start("nccl", "libnccl.so.2", built(build_info::kNcclVersion, triple_version_text));
  Found found = find_library(report.soname, policy);
  if (!fill_found(report, found)) return report;
  auto get = found.library.function<int (*)(int*)>("ncclGetVersion");
  if (get == nullptr) return missing_symbol(report, "ncclGetVersion", found.library.error());
  int version = 0;
  if (int status = get(&version); status != 0) report.error = fmt::format("ncclGetVersion returned {}", status);
  report.version = version;
  // NCCL before 2.9 encoded major * 1000 + minor * 100 + patch.
  report.version_text = version >= 20900 ? triple_version_text(version)
                                         : fmt::format("{}.{}.{}", version / 1000, version % 1000 / 100, version % 100);
  found.library.release();
  return report;
}

}  // namespace tandem::backend::doctor_detail
