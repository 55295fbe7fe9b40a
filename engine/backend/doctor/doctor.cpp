// run_doctor: the probes in a fixed order (libraries before the driver's cuInit, the plugin last
// so its own libcudart cannot stand in for the one the probe should find), then the diagnosis.
#include "engine/backend/doctor/doctor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "engine/backend/doctor/cuda_build_info.h"
#include "engine/backend/doctor/nvml.h"
#include "engine/backend/doctor/probes.h"
#include "engine/backend/plugin_loader.h"

namespace tandem::backend {
namespace {

// CUDA_VISIBLE_DEVICES hides every GPU when it is empty or its first entry is not a device
// (the driver stops at the first invalid entry: "-1", "none", "NoDevFiles").
bool hides_every_gpu(const std::string& value) {
  std::string first = value.substr(0, value.find(','));
  if (first.empty()) return true;
  if (first.starts_with("GPU-") || first.starts_with("MIG-")) return false;  // UUIDs
  for (char c : first) {
    if (c < '0' || c > '9') return true;
  }
  return false;
}

}  // namespace

std::string cuda_version_text(int version) {
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);
}

std::string cudnn_version_text(int version) {
  // cuDNN 9 encodes major * 10000 + minor * 100 + patch; cuDNN 8 used major * 1000 + minor * 100 + patch.
  if (version >= 90000) return triple_version_text(version);
  return fmt::format("{}.{}.{}", version / 1000, version % 1000 / 100, version % 100);
}

std::string triple_version_text(int version) {
  return fmt::format("{}.{}.{}", version / 10000, version % 10000 / 100, version % 100);
}

void match_architectures(GpuReport& gpu, const std::string& architectures) {
  int cc = gpu.cc_major * 10 + gpu.cc_minor;
  int best_native = 0;
  int best_ptx = 0;
  std::stringstream stream(architectures);
  std::string entry;
  while (stream >> entry) {
    bool real_only = entry.ends_with("-real");
    bool virtual_only = entry.ends_with("-virtual");
    int arch = std::atoi(entry.c_str());  // "90a-real" -> 90; arch-specific variants are not portable
    bool specific = entry.find('a') != std::string::npos && !virtual_only;
    if (arch <= 0) continue;
    // SASS for sm_XY runs on X.Y and later minors of the same major; PTX for any later GPU.
    if (!virtual_only && !specific && arch / 10 == gpu.cc_major && arch <= cc) best_native = std::max(best_native, arch);
    if (!real_only && arch <= cc) best_ptx = std::max(best_ptx, arch);
  }
  gpu.kernels_usable = best_native > 0 || best_ptx > 0;
  if (best_native > 0) {
    gpu.kernels = fmt::format("native (sm_{})", best_native);
  } else if (best_ptx > 0) {
    gpu.kernels = fmt::format("PTX JIT from compute_{} (slow first start)", best_ptx);
  } else {
    gpu.kernels = fmt::format("none (built for {})", architectures.empty() ? "no GPU" : architectures);
  }
}

DoctorReport run_doctor(const DoctorOptions& options) {
  DoctorReport report;
  doctor_detail::SearchPolicy policy = doctor_detail::make_policy(options.lib_dirs);
  report.search = policy.describe();
  report.built_architectures = build_info::kCudaArchitectures;
  report.required_device = options.required_device;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    report.cuda_visible_devices = visible;
    report.visible_devices_hide_all = hides_every_gpu(visible);
  }
  report.cuda_runtime = doctor_detail::probe_cuda_runtime(policy);
  report.cudnn = doctor_detail::probe_cudnn(policy);
  report.cublas = doctor_detail::probe_cublas(policy);
  report.nccl = doctor_detail::probe_nccl(policy);
  doctor_detail::probe_driver(policy, report);
  report.nvml = doctor_detail::probe_nvml(policy);
  report.cpu = probe_cpu();
  // Not with chosen folders: the plugin would bind to the libraries just loaded from them.
  if (options.probe_plugin && policy.exclusive_dirs.empty()) {
    const CudaPluginStatus& plugin = load_cuda_plugin();
    report.plugin = plugin.summary();
    report.plugin_loaded = plugin.loaded;
  }
  diagnose(report);
  return report;
}

}  // namespace tandem::backend
