// The doctor's library search. Default: exactly the system loader's order first (what the CUDA
// plugin will get), then the folders a TensorFlow user expects CUDA in, so a library that is
// installed but not on the loader's path is reported as such rather than as missing.
#include "engine/backend/doctor/library_search.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "engine/backend/doctor/cuda_build_info.h"

namespace tandem::backend::doctor_detail {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_colons(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ':')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

void add_unique(std::vector<std::string>& dirs, const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(dir, ec);
  std::string key = ec ? dir : canonical.string();
  for (const auto& d : dirs) {
    std::error_code ec2;
    fs::path other = fs::weakly_canonical(d, ec2);
    if ((ec2 ? d : other.string()) == key) return;
  }
  dirs.push_back(dir);
}

// Tries dir/soname in each folder; keeps the first real loader error (a file that exists but
// cannot load says more than "not found").
Found search_dirs(const std::string& soname, const std::vector<std::string>& dirs) {
  Found found;
  std::string first_error;
  for (const auto& dir : dirs) {
    std::string candidate = (fs::path(dir) / soname).string();
    std::error_code ec;
    if (!fs::exists(candidate, ec)) continue;
    SharedLibrary library(candidate);
    if (library.loaded()) {
      found.path = library.real_path();
      found.library = std::move(library);
      return found;
    }
    if (first_error.empty()) first_error = library.error();
  }
  std::string where;
  for (const auto& dir : dirs) where += (where.empty() ? "" : ", ") + dir;
  found.error = !first_error.empty() ? first_error : fmt::format("{}: not found in {}", soname, where);
  return found;
}

}  // namespace

std::string SearchPolicy::describe() const {
  auto join = [](const std::vector<std::string>& dirs) {
    std::string text;
    for (const auto& d : dirs) text += (text.empty() ? "" : ", ") + d;
    return text;
  };
  if (!exclusive_dirs.empty()) return "only in " + join(exclusive_dirs) + " (TANDEM_DOCTOR_LIB_DIRS / --lib-dir)";
  return "the system loader's path (LD_LIBRARY_PATH, ld.so.cache, /lib, /usr/lib), then " + join(fallback_dirs);
}

SearchPolicy make_policy(const std::vector<std::string>& lib_dirs) {
  SearchPolicy policy;
  policy.exclusive_dirs = lib_dirs;
  if (policy.exclusive_dirs.empty()) {
    if (const char* env = std::getenv("TANDEM_DOCTOR_LIB_DIRS"); env != nullptr) {
      policy.exclusive_dirs = split_colons(env);
    }
  }
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != '\0') {
    add_unique(policy.fallback_dirs, (fs::path(home) / "lib64").string());
  }
  add_unique(policy.fallback_dirs, build_info::kCudaToolkitLibDir);
  add_unique(policy.fallback_dirs, "/usr/local/cuda/lib64");
  return policy;
}

Found find_library(const std::string& soname, const SearchPolicy& policy, bool allow_fallback) {
  if (!policy.exclusive_dirs.empty()) return search_dirs(soname, policy.exclusive_dirs);
  Found found;
  SharedLibrary library(soname);  // a bare name: the system loader's own search
  if (library.loaded()) {
    found.path = library.real_path();
    found.library = std::move(library);
    return found;
  }
  found.error = library.error();
  if (!allow_fallback) return found;
  Found fallback = search_dirs(soname, policy.fallback_dirs);
  if (!fallback.library.loaded()) return found;  // the loader's words are the ones users see
  fallback.on_loader_path = false;
  return fallback;
}

}  // namespace tandem::backend::doctor_detail
