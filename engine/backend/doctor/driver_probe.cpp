// The driver probe: libcuda.so.1 by dlopen, the highest CUDA version it supports, cuInit, and
// each visible GPU's name, memory and compute capability, all through the driver API's C entry
// points (CUresult is an int, CUdevice an int; attribute numbers are those of cuda.h).
#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "engine/backend/doctor/cuda_build_info.h"
#include "engine/backend/doctor/probes.h"

namespace tandem::backend::doctor_detail {
namespace {

constexpr int kAttributeCcMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttributeCcMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

struct DriverApi {
  int (*driver_get_version)(int*) = nullptr;
  int (*init)(unsigned) = nullptr;
  int (*device_get_count)(int*) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*device_get_name)(char*, int, int) = nullptr;
  int (*device_total_mem)(size_t*, int) = nullptr;
  int (*device_get_attribute)(int*, int, int) = nullptr;
  int (*get_error_string)(int, const char**) = nullptr;  // optional: only for messages
};

std::string result_text(const DriverApi& api, int result) {
  const char* text = nullptr;
  if (api.get_error_string != nullptr && api.get_error_string(result, &text) == 0 && text != nullptr) {
    return fmt::format("{} ({})", text, result);
  }
  return fmt::format("CUresult {}", result);
}

// The kernel module's version, e.g. 580.65.06, which the driver API does not report: the first
// word of /proc/driver/nvidia/version made of digits and dots that starts with 3+ digits.
std::string kernel_module_version() {
  std::ifstream file("/proc/driver/nvidia/version");
  std::string word;
  while (file >> word) {
    size_t digits = word.find_first_not_of("0123456789");
    if (digits >= 3 && digits != std::string::npos && word[digits] == '.' &&
        word.find_first_not_of("0123456789.") == std::string::npos) {
      return word;
    }
  }
  return {};
}

void probe_gpus(const DriverApi& api, DoctorReport& report) {
  int count = 0;
  if (int r = api.device_get_count(&count); r != 0) {
    report.init_error = "cuDeviceGetCount: " + result_text(api, r);
    return;
  }
  for (int i = 0; i < count; ++i) {
    GpuReport gpu;
    gpu.index = i;
    int device = 0;
    char name[256] = {};
    if (api.device_get(&device, i) != 0) continue;
    if (api.device_get_name(name, sizeof(name), device) == 0) gpu.name = name;
    api.device_total_mem(&gpu.total_memory, device);
    api.device_get_attribute(&gpu.cc_major, kAttributeCcMajor, device);
    api.device_get_attribute(&gpu.cc_minor, kAttributeCcMinor, device);
    match_architectures(gpu, build_info::kCudaArchitectures);
    report.gpus.push_back(gpu);
  }
}

}  // namespace

void probe_driver(const SearchPolicy& policy, DoctorReport& report) {
  LibraryReport& driver = report.driver;
  driver.name = "driver";
  driver.soname = "libcuda.so.1";
  Found found = find_library(driver.soname, policy, /*allow_fallback=*/false);
  if (!fill_found(driver, found)) return;
  DriverApi api;
  SharedLibrary& lib = found.library;
  api.driver_get_version = lib.function<decltype(api.driver_get_version)>("cuDriverGetVersion");
  api.init = lib.function<decltype(api.init)>("cuInit");
  api.device_get_count = lib.function<decltype(api.device_get_count)>("cuDeviceGetCount");
  api.device_get = lib.function<decltype(api.device_get)>("cuDeviceGet");
  api.device_get_name = lib.function<decltype(api.device_get_name)>("cuDeviceGetName");
  api.device_total_mem = lib.function<decltype(api.device_total_mem)>("cuDeviceTotalMem_v2");
  api.device_get_attribute = lib.function<decltype(api.device_get_attribute)>("cuDeviceGetAttribute");
  if (!api.driver_get_version || !api.init || !api.device_get_count || !api.device_get || !api.device_get_name ||
      !api.device_total_mem || !api.device_get_attribute) {
    driver.found = false;
    driver.error = fmt::format("{} lacks a driver API entry point: {} (a stub or a broken install?)", driver.path,
                               lib.error());
    return;
  }
  api.get_error_string = lib.function<decltype(api.get_error_string)>("cuGetErrorString");
  lib.release();  // a driver is never unloaded once cuInit has run
  if (int r = api.driver_get_version(&driver.version); r != 0) driver.error = "cuDriverGetVersion: " + result_text(api, r);
  driver.version_text = cuda_version_text(driver.version);
  if (std::string module = kernel_module_version(); !module.empty()) driver.detail = "kernel module " + module;
  // cuInit honours CUDA_VISIBLE_DEVICES itself: the GPUs listed are the ones a run would see.
  if (int r = api.init(0); r != 0) {
    report.init_result = r;
    report.init_error = "cuInit: " + result_text(api, r);
    return;
  }
  probe_gpus(api, report);
}

}  // namespace tandem::backend::doctor_detail
