// The CUDA plugin loader: finds libtandem_cuda.so, opens it, checks its ABI and registers what
// it provides. Every failure is kept as text, naming the file and dlerror's words.
#include "engine/backend/plugin_loader.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <utility>

#include "engine/backend/doctor/cuda_build_info.h"
#include "engine/backend/plugin_abi.h"
#include "engine/backend/registry.h"
#include "engine/backend/shared_library.h"
#include "engine/core/device.h"
#include "engine/core/version.h"

namespace tandem::backend {
namespace {

namespace fs = std::filesystem;
constexpr const char* kPluginFile = "libtandem_cuda.so";

// Where libtandem_core.so was loaded from: an installed package puts the plugin beside it, so a
// program built against the package finds it wherever the program itself lives.
fs::path core_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&tandem::version), &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  fs::path path = fs::canonical(info.dli_fname, ec);
  return ec ? fs::path() : path.parent_path();
}

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

// The loaded plugin's handle, kept for later entry points (cuda_plugin_symbol). Never closed, so
// made on the heap where static destruction cannot close it at exit: the plugin's services outlive
// every handle, and CUDA must not be unloaded after cuInit.
SharedLibrary& loaded_plugin() {
  static auto* library = new SharedLibrary();
  return *library;
}

// Opens the entry point of an already dlopen'ed plugin and registers what it returns.
void initialise(SharedLibrary& library, CudaPluginStatus& status) {
  auto init = library.function<TandemCudaPluginInit>(kTandemCudaPluginEntry);
  if (init == nullptr) {
    status.error = fmt::format("{} has no entry point {}: {}", status.path, kTandemCudaPluginEntry, library.error());
    return;
  }
  TandemCudaPlugin plugin;
  if (init(kTandemCudaPluginAbi, &plugin) != 0) {
    status.error = fmt::format("{} loaded, but CUDA is not usable: {}", status.path, plugin.error);
    return;
  }
  // The services object belongs to the plugin, which stays loaded: nothing to delete.
  register_device_services(std::shared_ptr<DeviceServices>(plugin.services, [](DeviceServices*) {}));
  register_kernels(DeviceType::kCuda, plugin.kernels);
  loaded_plugin() = std::move(library);
  status.loaded = true;
  status.device_count = plugin.device_count;
  status.runtime = plugin.runtime_description;
}

CudaPluginStatus load() {
  CudaPluginStatus status;
  std::string first_failure;
  for (const std::string& candidate : cuda_plugin_candidates()) {
    bool bare_name = candidate.find('/') == std::string::npos;
    std::error_code ec;
    if (!bare_name && !fs::exists(candidate, ec)) {
      status.attempts.push_back(candidate + ": no such file");
      continue;
    }
    SharedLibrary library(candidate);
    if (!library.loaded()) {
      status.attempts.push_back(library.error());
      // A plugin file that exists but cannot load (a missing libcudart.so.13, say) says more
      // than a later "not found"; keep the first such reason.
      if (first_failure.empty() && !bare_name) {
        first_failure = library.error();
        status.path = candidate;
      }
      continue;
    }
    status.path = library.real_path().empty() ? candidate : library.real_path();
    status.attempts.push_back(status.path + ": loaded");
    initialise(library, status);
    return status;
  }
  if (!first_failure.empty()) {
    status.error = fmt::format("cannot load the CUDA plugin {}: {}", status.path, first_failure);
  } else {
    std::string tried;
    for (const auto& attempt : status.attempts) tried += (tried.empty() ? "" : "; ") + attempt;
    status.error = fmt::format("{} not found ({}); set TANDEM_CUDA_PLUGIN to its path", kPluginFile, tried);
  }
  return status;
}

}  // namespace

std::vector<std::string> cuda_plugin_candidates() {
  if (const char* forced = std::getenv("TANDEM_CUDA_PLUGIN"); forced != nullptr && *forced != '\0') {
    return {forced};
  }
  std::vector<std::string> candidates;
  fs::path dir = executable_dir();
  if (!dir.empty()) {
    candidates.push_back((dir / kPluginFile).string());
    candidates.push_back((dir / ".." / "engine" / "backend" / "cuda" / kPluginFile).lexically_normal().string());
    candidates.push_back((dir / ".." / "lib" / kPluginFile).lexically_normal().string());
  }
  if (fs::path core = core_library_dir(); !core.empty()) candidates.push_back((core / kPluginFile).string());
  std::string built = build_info::kCudaPluginBuildPath;
  if (!built.empty()) candidates.push_back(built);
  candidates.push_back(kPluginFile);
  // The build-tree path usually repeats a path relative to the executable; try each once.
  std::vector<std::string> unique;
  for (auto& c : candidates) {
    if (std::find(unique.begin(), unique.end(), c) == unique.end()) unique.push_back(c);
  }
  return unique;
}

const CudaPluginStatus& load_cuda_plugin() {
  static std::once_flag once;
  static CudaPluginStatus status;
  std::call_once(once, [] { status = load(); });
  return status;
}

void* cuda_plugin_symbol(const char* name, std::string* error) {
  const CudaPluginStatus& status = load_cuda_plugin();
  if (!status.loaded) {
    if (error != nullptr) *error = status.error;
    return nullptr;
  }
  // SharedLibrary::symbol keeps dlerror's text in the handle, which replica threads share.
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  void* address = loaded_plugin().symbol(name);
  if (address == nullptr && error != nullptr) *error = loaded_plugin().error();
  return address;
}

std::string CudaPluginStatus::summary() const {
  if (loaded) return fmt::format("CUDA plugin {} loaded: {}", path, runtime);
  return fmt::format("CUDA plugin not loaded: {}", error);
}

}  // namespace tandem::backend
