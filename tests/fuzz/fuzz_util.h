// Shared by the libFuzzer targets (tools/scripts/fuzz.sh): the readers under test take paths, so
// each input is written to one scratch file per process first.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace tandem::fuzz {

inline std::string scratch_file(const uint8_t* data, size_t size, const std::string& suffix) {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() / ("tandem-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  const std::string path = (dir / ("input" + suffix)).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                 static_cast<std::streamsize>(size));
  return path;
}

}  // namespace tandem::fuzz
