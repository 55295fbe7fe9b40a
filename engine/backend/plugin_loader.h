// Loads the CUDA backend plugin (libtandem_cuda.so) with dlopen, at the trainer's explicit call,
// so that `trainer` starts on a machine with no CUDA at all and can say exactly why CUDA is off.
#pragma once

#include <string>
#include <vector>

namespace tandem::backend {

struct CudaPluginStatus {
  bool loaded = false;                // device services and kernels are registered
  std::string path;                   // the plugin file loaded, or the one whose load failed
  std::vector<std::string> attempts;  // each candidate tried, with what happened
  std::string error;                  // why not loaded, in one line; empty when loaded
  std::string runtime;                // "CUDA runtime 13.0, 2 device(s)" when loaded
  int device_count = 0;

  std::string summary() const;  // one line for the log and the doctor
};

// Search order, first hit wins:
//   1. $TANDEM_CUDA_PLUGIN, a file path; when set, nothing else is tried;
//   2. the running executable's folder, then ../engine/backend/cuda and ../lib relative to it
//      (the build tree and an install tree);
//   3. where this build tree puts the plugin (a path fixed at configure time);
//   4. "libtandem_cuda.so" by name, as the system loader searches.
// Then it checks the ABI version, calls the entry point, and registers the services with
// register_device_services and the kernel table with register_kernels. Runs once per process;
// later calls return the first result. Never throws: a missing CUDA is a status, not an error.
const CudaPluginStatus& load_cuda_plugin();

// Candidates of the search above, for the doctor's report and for tests.
std::vector<std::string> cuda_plugin_candidates();

// Another entry point of the plugin load_cuda_plugin() loaded (kTandemNcclEntry, say), looked up
// through the loader's own handle, so nothing else opens the plugin a second time. nullptr when
// the plugin is not loaded (*error: the load's error) or lacks the symbol (*error: dlerror's words).
void* cuda_plugin_symbol(const char* name, std::string* error);

template <typename Fn>
Fn cuda_plugin_function(const char* name, std::string* error) {
  return reinterpret_cast<Fn>(cuda_plugin_symbol(name, error));
}

}  // namespace tandem::backend
