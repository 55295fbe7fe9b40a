// dlopen/dlsym/dlinfo behind SharedLibrary; dlerror's text is kept for the caller's message.
#include "engine/backend/shared_library.h"

#include <dlfcn.h>
#include <link.h>

#include <filesystem>
#include <system_error>
#include <utility>

namespace tandem::backend {

SharedLibrary::SharedLibrary(const std::string& name_or_path) {
  dlerror();  // clear a stale message
  handle_ = dlopen(name_or_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* text = dlerror();
    error_ = text != nullptr ? text : name_or_path + ": dlopen failed without a message";
  }
}

SharedLibrary::~SharedLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

SharedLibrary::SharedLibrary(SharedLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), error_(std::move(other.error_)) {}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    error_ = std::move(other.error_);
  }
  return *this;
}

void* SharedLibrary::symbol(const char* name) {
  if (handle_ == nullptr) return nullptr;
  dlerror();
  void* address = dlsym(handle_, name);
  if (address == nullptr) {
    const char* text = dlerror();
    error_ = text != nullptr ? text : std::string(name) + ": symbol is null";
  }
  return address;
}

std::string SharedLibrary::real_path() const {
  if (handle_ == nullptr) return {};
  link_map* map = nullptr;
  if (dlinfo(handle_, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) return {};
  std::error_code ec;
  auto canonical = std::filesystem::canonical(map->l_name, ec);
  return ec ? std::string(map->l_name) : canonical.string();
}

}  // namespace tandem::backend
