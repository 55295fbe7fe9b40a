// Helpers for the tests of a run's outputs: a temporary folder removed at the end, and whole-file
// reads and writes.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tools::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::string read_file(const std::filesystem::path& path);
void write_file(const std::filesystem::path& path, std::string_view bytes);
std::vector<std::string> split_lines(const std::string& text);  // without the newlines

}  // namespace tandem::tools::testing
