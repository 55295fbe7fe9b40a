// Helpers for the tests of a run's outputs: a temporary folder removed at the end, and whole-file
// reads and writes.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/temp_dir.h"

namespace tandem::tools::testing {

using ::tandem::testing::TempDir;

std::string read_file(const std::filesystem::path& path);
void write_file(const std::filesystem::path& path, std::string_view bytes);
std::vector<std::string> split_lines(const std::string& text);  // without the newlines

}  // namespace tandem::tools::testing
