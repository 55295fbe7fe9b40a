// From probe results to causes with fixes, and one verdict. Pure: tests build reports by hand.
// No GPU (no driver, none visible) means the CPU runs: "ready: cpu only". A GPU that is there
// but unusable (old driver, missing or mismatched libraries) means "not ready".
#include <fmt/format.h>

#include "engine/backend/doctor/cuda_build_info.h"
#include "engine/backend/doctor/doctor.h"

namespace tandem::backend {
namespace {

// NVIDIA's "CUDA Toolkit and Corresponding Driver Versions" table: CUDA 13.0 GA needs Linux
// x86_64 driver >= 580.65.06; the R580 branch serves all of CUDA 13.x by minor-version
// compatibility.
constexpr const char* kDriverForCuda13 = "R580 or newer (at least 580.65.06, the CUDA 13.0 driver)";

int major_of(int version, int scale) { return version / scale; }

void add(DoctorReport& r, Severity severity, std::string summary, std::string fix) {
  r.causes.push_back({severity, std::move(summary), std::move(fix)});
}

// The CUDA major Tandem needs: the runtime found, else the one it was built with.
int runtime_version(const DoctorReport& r) {
  return r.cuda_runtime.found ? r.cuda_runtime.version : build_info::kCudaVersion;
}

void diagnose_driver(DoctorReport& r) {
  if (!r.driver.found && r.nvml.found && !r.nvml.gpus.empty()) {
    // NVML (what nvidia-smi uses) is there and sees GPUs, libcuda is not: the driver is installed
    // but its compute part was not mounted, typically a container started with
    // NVIDIA_DRIVER_CAPABILITIES=utility (nvidia-smi works, CUDA does not).
    add(r, Severity::kNoGpu,
        fmt::format("no CUDA driver library although NVML sees {} GPU{} (driver {}): {}", r.nvml.gpus.size(),
                    r.nvml.gpus.size() == 1 ? "" : "s", r.nvml.driver_version, r.driver.error),
        "the driver's compute library libcuda.so.1 is missing beside a working nvidia-smi: in a container, set "
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility (or all) with `--gpus all`; on a host, reinstall the driver "
        "package that provides libcuda.so.1 (e.g. libnvidia-compute-580)");
    return;
  }
  if (!r.driver.found) {
    add(r, Severity::kNoGpu, fmt::format("no NVIDIA driver: {}", r.driver.error),
        fmt::format("install the NVIDIA driver, {}, then check that `nvidia-smi` lists the GPUs; in a container, "
                    "start it with `--gpus all` (NVIDIA Container Toolkit) so the driver is mounted in",
                    kDriverForCuda13));
    return;
  }
  int needed = runtime_version(r);
  if (needed > 0 && major_of(r.driver.version, 1000) < major_of(needed, 1000)) {
    add(r, Severity::kError,
        fmt::format("driver too old: it supports CUDA up to {}, the CUDA runtime is {} (cudart reports this as "
                    "\"CUDA driver version is insufficient for CUDA runtime version\")",
                    r.driver.version_text, cuda_version_text(needed)),
        fmt::format("update the NVIDIA driver to {}", kDriverForCuda13));
  } else if (needed > 0 && r.driver.version < needed) {
    add(r, Severity::kWarning,
        fmt::format("the driver supports CUDA {}, older than the runtime's {}: it runs by minor-version "
                    "compatibility, but PTX built for the newer version cannot be compiled",
                    r.driver.version_text, cuda_version_text(needed)),
        "update the NVIDIA driver to the newest of its branch");
  }
  if (r.init_result != 0 && r.init_result != 100) {
    add(r, Severity::kError, "the driver is installed but cannot start: " + r.init_error,
        "check `nvidia-smi` and `dmesg` for the kernel module (nvidia.ko) and reboot after a driver update");
  }
}

void diagnose_visible_gpus(DoctorReport& r) {
  if (!r.driver.found || !r.gpus.empty() || (r.init_result != 0 && r.init_result != 100)) return;
  if (r.cuda_visible_devices && r.visible_devices_hide_all) {
    add(r, Severity::kNoGpu, fmt::format("CUDA_VISIBLE_DEVICES=\"{}\" hides every GPU", *r.cuda_visible_devices),
        "unset CUDA_VISIBLE_DEVICES, or set it to the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0,1");
  } else if (r.cuda_visible_devices) {
    add(r, Severity::kNoGpu,
        fmt::format("no GPU visible: the driver finds none with CUDA_VISIBLE_DEVICES=\"{}\"", *r.cuda_visible_devices),
        "check the indices against `nvidia-smi -L`, or unset CUDA_VISIBLE_DEVICES");
  } else {
    add(r, Severity::kNoGpu, "no GPU visible: the driver is loaded but finds no CUDA-capable device",
        "check `nvidia-smi`; in a container, start it with `--gpus all`");
  }
}

void diagnose_library(DoctorReport& r, const LibraryReport& lib, const std::string& title, int scale,
                      const std::string& install) {
  int built = 0;
  if (lib.name == "cuda_runtime") built = build_info::kCudaVersion;
  if (lib.name == "cudnn") built = build_info::kCudnnVersion;
  if (lib.name == "cublas") built = build_info::kCublasVersion;
  if (!lib.found) {
    std::string other = lib.detail.empty() ? "" : "; " + lib.detail;
    add(r, Severity::kError, fmt::format("{} missing: could not load {} ({}){}", title, lib.soname, lib.error, other),
        install);
    return;
  }
  if (built > 0 && major_of(lib.version, scale) != major_of(built, scale)) {
    add(r, Severity::kError,
        fmt::format("{} major version mismatch: found {} at {}, Tandem was built against {}", title, lib.version_text,
                    lib.path, lib.built_against),
        install);
  }
  if (!lib.on_loader_path) {
    add(r, Severity::kWarning,
        fmt::format("{} is in {} but not on the system loader's path", lib.soname, lib.path),
        fmt::format("add its folder to LD_LIBRARY_PATH, or to a file in /etc/ld.so.conf.d/ and run ldconfig"));
  }
}

void diagnose_libraries(DoctorReport& r) {
  int cuda_major = major_of(build_info::kCudaVersion, 1000);
  std::string cuda = fmt::format("CUDA {}", cuda_major);
  diagnose_library(r, r.cuda_runtime, "CUDA runtime", 1000,
                   fmt::format("install the {} runtime (libcudart.so.{}) and put its folder on LD_LIBRARY_PATH",
                               cuda, cuda_major));
  std::string cudnn_fix = fmt::format("install cuDNN {} for {}", major_of(build_info::kCudnnVersion, 10000), cuda);
  diagnose_library(r, r.cudnn, "cuDNN", 10000, cudnn_fix);
  // A cuDNN 9 built for another CUDA major loads, then fails at the first convolution.
  if (r.cudnn.found && r.cuda_runtime.found && r.cudnn.detail.starts_with("built for CUDA ")) {
    int cudnn_cuda = std::atoi(r.cudnn.detail.c_str() + 15);
    if (cudnn_cuda != major_of(r.cuda_runtime.version, 1000)) {
      add(r, Severity::kError,
          fmt::format("cuDNN {} at {} was {}, but the CUDA runtime is {}", r.cudnn.version_text, r.cudnn.path,
                      r.cudnn.detail, r.cuda_runtime.version_text),
          cudnn_fix);
    }
  }
  diagnose_library(r, r.cublas, "cuBLAS", 10000,
                   fmt::format("install cuBLAS for {} (libcublas.so.{})", cuda, cuda_major));
  bool multi_gpu = r.gpus.size() > 1;
  size_t before = r.causes.size();
  diagnose_library(r, r.nccl, "NCCL", 10000, fmt::format("install NCCL 2 for {} (libnccl2)", cuda));
  // One GPU needs no all-reduce: a missing NCCL only blocks training on several.
  for (size_t i = before; i < r.causes.size() && !multi_gpu; ++i) {
    if (r.causes[i].severity == Severity::kError) {
      r.causes[i].severity = Severity::kWarning;
      r.causes[i].summary += " (needed only for more than one GPU)";
    }
  }
}

void diagnose_gpus(DoctorReport& r) {
  for (const GpuReport& gpu : r.gpus) {
    if (gpu.kernels_usable) continue;
    add(r, Severity::kError,
        fmt::format("GPU {} ({}, compute capability {}.{}) has no Tandem kernels: they were built for sm {}",
                    gpu.index, gpu.name, gpu.cc_major, gpu.cc_minor, r.built_architectures),
        fmt::format("rebuild with -DCMAKE_CUDA_ARCHITECTURES=\"{} {}{}\"", r.built_architectures, gpu.cc_major,
                    gpu.cc_minor));
  }
}

void decide(DoctorReport& r) {
  auto first = [&](Severity s) -> const Cause* {
    for (const Cause& c : r.causes) {
      if (c.severity == s) return &c;
    }
    return nullptr;
  };
  if (const Cause* no_gpu = first(Severity::kNoGpu)) {
    r.verdict = Verdict::kReadyCpuOnly;
    r.verdict_line = "ready: cpu only (no GPU): " + no_gpu->summary;
    if (r.required_device == "cuda") {
      r.verdict = Verdict::kNotReady;
      r.verdict_line = "not ready: device: cuda is configured, but " + no_gpu->summary;
    }
    return;
  }
  if (const Cause* error = first(Severity::kError)) {
    r.verdict = Verdict::kNotReady;
    r.verdict_line = "not ready: " + error->summary;
    return;
  }
  r.verdict = Verdict::kReadyCuda;
  r.verdict_line = fmt::format("ready: cuda ({} GPU{})", r.gpus.size(), r.gpus.size() == 1 ? "" : "s");
}

}  // namespace

void diagnose(DoctorReport& r) {
  r.causes.clear();
  diagnose_driver(r);
  diagnose_visible_gpus(r);
  diagnose_libraries(r);
  diagnose_gpus(r);
  if (!r.plugin.empty() && !r.plugin_loaded && !r.gpus.empty()) {
    add(r, Severity::kError, r.plugin, "rebuild Tandem with CUDA (CUDA_HOME set), or set TANDEM_CUDA_PLUGIN to libtandem_cuda.so");
  }
  // Without a build against CUDA there is nothing to compare with and no plugin to load.
  if (!build_info::kCudaBuilt) {
    add(r, Severity::kNoGpu, "this Tandem was built without CUDA", "rebuild with CUDA_HOME pointing at a CUDA toolkit");
  }
  decide(r);
}

}  // namespace tandem::backend
