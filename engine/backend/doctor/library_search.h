// Where the doctor looks for a CUDA library, and the outcome of looking: the loaded handle, the
// file it came from, and the loader's own words when nothing loaded.
#pragma once

#include <string>
#include <vector>

#include "engine/backend/shared_library.h"

namespace tandem::backend::doctor_detail {

struct SearchPolicy {
  std::vector<std::string> exclusive_dirs;  // when set, only these folders
  std::vector<std::string> fallback_dirs;   // tried after the system loader fails
  std::string describe() const;
};

// DoctorOptions.lib_dirs, else TANDEM_DOCTOR_LIB_DIRS, else the loader plus CUDA's usual folders.
SearchPolicy make_policy(const std::vector<std::string>& lib_dirs);

struct Found {
  SharedLibrary library;        // loaded() false when not found
  std::string path;             // real file when loaded
  std::string error;            // why not, when not loaded
  bool on_loader_path = true;   // false when only a fallback folder had it
};

// Finds `soname` as the policy says. `allow_fallback` is false for the driver: the toolkit's
// folders hold only a link stub of libcuda that must never be taken for a driver.
Found find_library(const std::string& soname, const SearchPolicy& policy, bool allow_fallback = true);

}  // namespace tandem::backend::doctor_detail
