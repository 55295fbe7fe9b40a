// A fresh folder under the system temp dir for one test, removed with everything in it when the
// object dies (permissions restored first, so a test may make it unwritable). Shared by every
// test executable.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tandem::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }
  std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tandem::testing
