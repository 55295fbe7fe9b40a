// NVML through dlopen: the few types and entry points used, declared as plain C with the layouts of
// NVIDIA's nvml.h (CUDA 12.6's header, checked field by field); the session both GpuMonitor and the
// doctor start (resolve, nvmlInit_v2, device handles); the CUDA-to-NVML map; the idle verdict.
#include "engine/backend/doctor/nvml.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <type_traits>

#include "engine/backend/doctor/library_search.h"
#include "engine/backend/shared_library.h"

namespace tandem::backend {
namespace {

// nvml.h: typedef struct nvmlDevice_st* nvmlDevice_t; nvmlReturn_t is an enum (int), NVML_SUCCESS 0.
struct NvmlDeviceOpaque;
using NvmlDevice = NvmlDeviceOpaque*;
constexpr int kNvmlSuccess = 0;
constexpr unsigned kNameBufferSize = 96;           // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kDriverVersionBufferSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
constexpr unsigned kUuidBufferSize = 96;           // NVML_DEVICE_UUID_V2_BUFFER_SIZE

struct NvmlMemory {  // nvmlMemory_t (v1), bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct NvmlUtilization {  // nvmlUtilization_t, percent
  unsigned int gpu;
  unsigned int memory;
};

struct NvmlPciInfo {  // nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it
  char bus_id_legacy[16];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE: "00000000:65:00.0"
};
static_assert(sizeof(NvmlPciInfo) == 16 + 5 * 4 + 32);

struct NvmlApi {
  int (*init)() = nullptr;                                          // nvmlInit_v2
  int (*shutdown)() = nullptr;                                      // nvmlShutdown
  const char* (*error_string)(int) = nullptr;                       // nvmlErrorString
  int (*driver_version)(char*, unsigned) = nullptr;                 // nvmlSystemGetDriverVersion
  int (*count)(unsigned*) = nullptr;                                // nvmlDeviceGetCount_v2
  int (*handle_by_index)(unsigned, NvmlDevice*) = nullptr;          // nvmlDeviceGetHandleByIndex_v2
  int (*name)(NvmlDevice, char*, unsigned) = nullptr;               // nvmlDeviceGetName
  int (*memory)(NvmlDevice, NvmlMemory*) = nullptr;                 // nvmlDeviceGetMemoryInfo
  int (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;       // nvmlDeviceGetUtilizationRates
  int (*power)(NvmlDevice, unsigned*) = nullptr;                    // nvmlDeviceGetPowerUsage, mW
  int (*compute_capability)(NvmlDevice, int*, int*) = nullptr;      // nvmlDeviceGetCudaComputeCapability
  int (*pci_info)(NvmlDevice, NvmlPciInfo*) = nullptr;              // nvmlDeviceGetPciInfo_v3 (optional)
  int (*uuid)(NvmlDevice, char*, unsigned) = nullptr;               // nvmlDeviceGetUUID (optional)

  std::string text(int result) const {
    const char* words = error_string != nullptr ? error_string(result) : nullptr;
    return words != nullptr ? fmt::format("{} ({})", words, result) : fmt::format("nvmlReturn_t {}", result);
  }
};

// Resolves every entry point; false and why when a required one is missing.
bool resolve(SharedLibrary& lib, NvmlApi& api, std::string* why) {
  auto get = [&](auto& fn, const char* symbol) {
    fn = lib.function<std::remove_reference_t<decltype(fn)>>(symbol);
    return fn != nullptr;
  };
  // Short-circuits, so lib.error() names the first missing symbol.
  bool ok = get(api.init, "nvmlInit_v2") && get(api.shutdown, "nvmlShutdown") &&
            get(api.error_string, "nvmlErrorString") && get(api.driver_version, "nvmlSystemGetDriverVersion") &&
            get(api.count, "nvmlDeviceGetCount_v2") && get(api.handle_by_index, "nvmlDeviceGetHandleByIndex_v2") &&
            get(api.name, "nvmlDeviceGetName") && get(api.memory, "nvmlDeviceGetMemoryInfo") &&
            get(api.utilization, "nvmlDeviceGetUtilizationRates") && get(api.power, "nvmlDeviceGetPowerUsage") &&
            get(api.compute_capability, "nvmlDeviceGetCudaComputeCapability");
  if (!ok) {
    *why = fmt::format("{} lacks an NVML entry point: {}", lib.real_path(), lib.error());
    return false;
  }
  get(api.pci_info, "nvmlDeviceGetPciInfo_v3");
  get(api.uuid, "nvmlDeviceGetUUID");
  return true;
}

// An initialised NVML: entry points, the driver version, a handle per NVML index (nullptr where
// NVML refused it, e.g. NVML_ERROR_NO_PERMISSION for a GPU of another container).
struct Session {
  NvmlApi api;
  std::string driver_version;
  std::vector<NvmlDevice> devices;
};

std::optional<Session> start(SharedLibrary& lib, std::string* why) {
  Session s;
  if (!resolve(lib, s.api, why)) return std::nullopt;
  if (int r = s.api.init(); r != kNvmlSuccess) {
    *why = "nvmlInit_v2: " + s.api.text(r);
    return std::nullopt;
  }
  char version[kDriverVersionBufferSize] = {};
  if (s.api.driver_version(version, sizeof(version)) == kNvmlSuccess) s.driver_version = version;
  unsigned count = 0;
  if (int r = s.api.count(&count); r != kNvmlSuccess) {
    *why = "nvmlDeviceGetCount_v2: " + s.api.text(r);
    s.api.shutdown();
    return std::nullopt;
  }
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    if (s.api.handle_by_index(i, &device) != kNvmlSuccess) device = nullptr;
    s.devices.push_back(device);
  }
  return s;
}

std::string device_name(const Session& s, NvmlDevice device) {
  char name[kNameBufferSize] = {};
  return device != nullptr && s.api.name(device, name, sizeof(name)) == kNvmlSuccess ? name : "";
}

// domain:bus:device.function as numbers, from "0000:65:00.0" (CUDA) or "00000000:65:00.0" (NVML);
// a missing domain is 0.
std::optional<std::array<unsigned long, 4>> parse_bus_id(const std::string& text) {
  std::array<unsigned long, 4> parts{};
  size_t colons = static_cast<size_t>(std::count(text.begin(), text.end(), ':'));
  if (colons < 1 || colons > 2) return std::nullopt;
  const char* p = text.c_str();
  for (size_t i = colons == 2 ? 0 : 1; i < 4; ++i) {
    char* end = nullptr;
    parts[i] = std::strtoul(p, &end, 16);
    char expected = i < 2 ? ':' : i == 2 ? '.' : '\0';
    if (end == p || *end != expected) return std::nullopt;
    p = end + (expected != '\0' ? 1 : 0);
  }
  return parts;
}

int nvml_index_of_bus_id(const Session& s, const std::string& bus_id) {
  auto wanted = parse_bus_id(bus_id);
  if (!wanted || s.api.pci_info == nullptr) return -1;
  for (size_t i = 0; i < s.devices.size(); ++i) {
    NvmlPciInfo pci{};
    if (s.devices[i] == nullptr || s.api.pci_info(s.devices[i], &pci) != kNvmlSuccess) continue;
    pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
    if (parse_bus_id(pci.bus_id) == wanted) return static_cast<int>(i);
  }
  return -1;
}

// The one NVML device whose UUID starts with `prefix` (CUDA accepts unique prefixes), else -1.
int nvml_index_of_uuid(const Session& s, const std::string& prefix) {
  int match = -1;
  for (size_t i = 0; i < s.devices.size() && s.api.uuid != nullptr; ++i) {
    char uuid[kUuidBufferSize] = {};
    if (s.devices[i] == nullptr || s.api.uuid(s.devices[i], uuid, sizeof(uuid)) != kNvmlSuccess) continue;
    if (!std::string_view(uuid).starts_with(prefix)) continue;
    if (match >= 0) return -1;  // ambiguous
    match = static_cast<int>(i);
  }
  return match;
}

std::string trim(const std::string& text) {
  size_t first = text.find_first_not_of(" \t");
  size_t last = text.find_last_not_of(" \t");
  return first == std::string::npos ? "" : text.substr(first, last - first + 1);
}

// CUDA_VISIBLE_DEVICES as CUDA reads it: entries in order, up to the first it rejects (an index
// out of range, an unknown UUID, anything else). A MIG instance is visible but has no NVML device
// of its own here (-1). *numeric: whether an index was used (UUIDs are exact, indices depend on
// CUDA's order).
std::vector<int> map_visible_devices(const Session& s, const std::string& visible, bool* numeric) {
  std::vector<int> map;
  size_t start = 0;
  while (start <= visible.size()) {
    size_t comma = visible.find(',', start);
    std::string entry = trim(visible.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    int index = -1;
    if (entry.starts_with("MIG-")) {
      index = -1;
    } else if (entry.starts_with("GPU-")) {
      index = nvml_index_of_uuid(s, entry);
      if (index < 0) break;
    } else {
      char* end = nullptr;
      long number = std::strtol(entry.c_str(), &end, 10);
      if (entry.empty() || *end != '\0' || number < 0 || number >= static_cast<long>(s.devices.size())) break;
      index = static_cast<int>(number);
      *numeric = true;
    }
    map.push_back(index);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return map;
}

// Numeric indices are CUDA's order, fastest GPU first unless CUDA_DEVICE_ORDER=PCI_BUS_ID; NVML's
// is PCI order. The two agree when every GPU is the same model (ties go by bus id).
std::string order_warning(const Session& s) {
  const char* order = std::getenv("CUDA_DEVICE_ORDER");
  if (order != nullptr && std::string_view(order) == "PCI_BUS_ID") return "";
  std::optional<std::string> first;
  for (NvmlDevice device : s.devices) {
    if (device == nullptr) continue;
    std::string name = device_name(s, device);
    if (!first) first = name;
    if (name != *first) {
      return "; warning: the GPUs differ in model and CUDA_DEVICE_ORDER is not PCI_BUS_ID, so CUDA numbers the "
             "fastest first and a CUDA index may name another GPU than NVML's: set CUDA_DEVICE_ORDER=PCI_BUS_ID";
    }
  }
  return "";
}

std::string join_map(const std::vector<int>& map) {
  std::string text;
  for (size_t i = 0; i < map.size(); ++i) {
    text += fmt::format("{}cuda:{} -> {}", i == 0 ? "" : ", ", i, map[i] < 0 ? "none" : fmt::format("nvml:{}", map[i]));
  }
  return text.empty() ? "no CUDA device" : text;
}

double to_mib(unsigned long long bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

std::string or_na(double value, const char* unit) {
  return std::isfinite(value) ? fmt::format("{:.0f}{}", value, unit) : "n/a";
}

}  // namespace

struct GpuMonitor::State {
  Session session;
  std::vector<int> cuda_to_nvml;
  std::string mapping_note;
};

std::optional<std::string> GpuMonitorOptions::environment_cuda_visible_devices() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

GpuMonitor::GpuMonitor(std::unique_ptr<State> state) : state_(std::move(state)) {}

GpuMonitor::~GpuMonitor() { state_->session.api.shutdown(); }

std::unique_ptr<GpuMonitor> GpuMonitor::open(std::string* why_not, const GpuMonitorOptions& options) {
  std::string why;
  SharedLibrary lib(options.library);
  std::optional<Session> session;
  if (!lib.loaded()) {
    why = lib.error();
  } else {
    session = start(lib, &why);
  }
  if (!session) {
    if (why_not != nullptr) *why_not = "NVML not available: " + why;
    return nullptr;
  }
  lib.release();  // the session's entry points must stay mapped; NVML comes with the driver anyway
  auto state = std::make_unique<State>();
  state->session = std::move(*session);
  const Session& s = state->session;
  if (!options.cuda_pci_bus_ids.empty()) {
    for (const std::string& bus_id : options.cuda_pci_bus_ids) {
      state->cuda_to_nvml.push_back(nvml_index_of_bus_id(s, bus_id));
    }
    state->mapping_note = "by PCI bus id: " + join_map(state->cuda_to_nvml);
  } else if (options.cuda_visible_devices) {
    bool numeric = false;
    state->cuda_to_nvml = map_visible_devices(s, *options.cuda_visible_devices, &numeric);
    state->mapping_note = fmt::format("by CUDA_VISIBLE_DEVICES=\"{}\": {}{}", *options.cuda_visible_devices,
                                      join_map(state->cuda_to_nvml), numeric ? order_warning(s) : "");
  } else {
    for (size_t i = 0; i < s.devices.size(); ++i) state->cuda_to_nvml.push_back(static_cast<int>(i));
    state->mapping_note =
        "by index (CUDA_VISIBLE_DEVICES not set): " + join_map(state->cuda_to_nvml) + order_warning(s);
  }
  return std::unique_ptr<GpuMonitor>(new GpuMonitor(std::move(state)));
}

int GpuMonitor::nvml_index_for(int cuda_index) const {
  const auto& map = state_->cuda_to_nvml;
  return cuda_index >= 0 && static_cast<size_t>(cuda_index) < map.size() ? map[static_cast<size_t>(cuda_index)] : -1;
}

int GpuMonitor::nvml_device_count() const { return static_cast<int>(state_->session.devices.size()); }
const std::string& GpuMonitor::driver_version() const { return state_->session.driver_version; }
const std::string& GpuMonitor::mapping_note() const { return state_->mapping_note; }

void GpuMonitor::sample_into(const std::vector<int>& cuda_indices, std::vector<GpuSample>& out) const {
  const Session& s = state_->session;
  out.resize(cuda_indices.size());
  for (size_t i = 0; i < cuda_indices.size(); ++i) {
    GpuSample& sample = out[i];
    sample = GpuSample{};
    sample.index = cuda_indices[i];
    sample.nvml_index = nvml_index_for(sample.index);
    NvmlDevice device = sample.nvml_index >= 0 ? s.devices[static_cast<size_t>(sample.nvml_index)] : nullptr;
    if (device == nullptr) continue;
    NvmlUtilization utilization{};
    if (s.api.utilization(device, &utilization) == kNvmlSuccess) sample.utilization_percent = utilization.gpu;
    NvmlMemory memory{};
    if (s.api.memory(device, &memory) == kNvmlSuccess) {
      sample.memory_used_mb = to_mib(memory.used);
      sample.memory_total_mb = to_mib(memory.total);
    }
    unsigned milliwatts = 0;
    if (s.api.power(device, &milliwatts) == kNvmlSuccess) sample.power_watts = milliwatts / 1000.0;
  }
}

std::vector<GpuSample> GpuMonitor::sample(const std::vector<int>& cuda_indices) const {
  std::vector<GpuSample> out;
  sample_into(cuda_indices, out);
  return out;
}

std::string format_gpu_sample(const GpuSample& s) {
  std::string memory = std::isfinite(s.memory_used_mb) && std::isfinite(s.memory_total_mb)
                           ? fmt::format("{:.1f}/{:.1f} GiB", s.memory_used_mb / 1024.0, s.memory_total_mb / 1024.0)
                           : "n/a";
  return fmt::format("cuda:{} util {} mem {} {}", s.index, or_na(s.utilization_percent, "%"), memory,
                     or_na(s.power_watts, " W"));
}

std::string gpu_idle_verdict(double utilization_percent, double input_wait_fraction) {
  if (!std::isfinite(utilization_percent) || !std::isfinite(input_wait_fraction)) return "";
  if (utilization_percent >= kIdleGpuUtilizationPercent || input_wait_fraction <= kInputBoundWaitFraction) return "";
  return fmt::format(
      "input-bound: the GPU is busy {:.0f}% of the time while its replica waits for input {:.0f}% of each step; "
      "feed it faster: raise data.num_parallel_calls (decode threads) and data.prefetch, set data.cache: true "
      "(or data.cache_file) so later epochs skip reading and decoding, or move the files to faster local storage "
      "(`trainer bench-input` measures the pipeline alone)",
      utilization_percent, input_wait_fraction * 100.0);
}

namespace doctor_detail {

NvmlReport probe_nvml(const SearchPolicy& policy) {
  NvmlReport report;
  // No fallback folders: the toolkit's only libnvidia-ml is a link stub (lib64/stubs).
  Found found = find_library("libnvidia-ml.so.1", policy, /*allow_fallback=*/false);
  if (!found.library.loaded()) {
    report.error = found.error;
    return report;
  }
  report.path = found.path;
  std::optional<Session> session = start(found.library, &report.error);
  if (!session) return report;
  found.library.release();  // as the driver's: never unloaded once initialised
  report.found = true;
  report.driver_version = session->driver_version;
  for (size_t i = 0; i < session->devices.size(); ++i) {
    NvmlDevice device = session->devices[i];
    NvmlGpuReport gpu;
    gpu.index = static_cast<int>(i);
    if (device == nullptr) {
      gpu.name = "(NVML refused a handle to this GPU)";
      report.gpus.push_back(gpu);
      continue;
    }
    gpu.name = device_name(*session, device);
    if (NvmlMemory memory{}; session->api.memory(device, &memory) == kNvmlSuccess) {
      gpu.memory_total = memory.total;
      gpu.memory_used = memory.used;
    }
    session->api.compute_capability(device, &gpu.cc_major, &gpu.cc_minor);
    if (NvmlPciInfo pci{}; session->api.pci_info != nullptr && session->api.pci_info(device, &pci) == kNvmlSuccess) {
      pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
      gpu.pci_bus_id = pci.bus_id;
    }
    report.gpus.push_back(gpu);
  }
  session->api.shutdown();
  return report;
}

}  // namespace doctor_detail
}  // namespace tandem::backend
