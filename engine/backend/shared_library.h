// A dlopen'ed library as an RAII handle, and where the loader really found it. Used by the
// CUDA plugin loader and by the doctor, so neither ever links a CUDA library.
#pragma once

#include <string>

namespace tandem::backend {

class SharedLibrary {
 public:
  SharedLibrary() = default;
  // dlopen(name_or_path, RTLD_NOW | RTLD_LOCAL). A bare name is searched as the system loader
  // does (LD_LIBRARY_PATH, the executable's RUNPATH, ld.so.cache, /lib, /usr/lib); a path is
  // opened as given. On failure loaded() is false and error() holds dlerror's text.
  explicit SharedLibrary(const std::string& name_or_path);
  ~SharedLibrary();
  SharedLibrary(SharedLibrary&& other) noexcept;
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }
  // The address of a symbol, or nullptr (error() then says why).
  void* symbol(const char* name);
  template <typename Fn>
  Fn function(const char* name) {
    return reinterpret_cast<Fn>(symbol(name));
  }
  // The file the loader mapped, symlinks resolved (from the link map, so a bare soname gives
  // the real path); empty when not loaded.
  std::string real_path() const;
  // Keeps the library mapped for the rest of the process (a CUDA driver must never be unloaded
  // after cuInit; the plugin's services outlive any handle).
  void release() { handle_ = nullptr; }

 private:
  void* handle_ = nullptr;
  std::string error_;
};

}  // namespace tandem::backend
