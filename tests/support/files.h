// Whole-file reads and writes for tests.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/temp_dir.h"

namespace tandem::testing {

std::string read_file(const std::filesystem::path& path);
void write_file(const std::filesystem::path& path, std::string_view bytes);
std::vector<std::string> split_lines(const std::string& text);  // without the newlines

}  // namespace tandem::testing
