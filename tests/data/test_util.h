// Helpers shared by the data tests: where the conformance corpus is, SHA-256, base64,
// manifest.json loading (through protobuf's JSON parser into a Struct) and temp folders.
#pragma once

#include <google/protobuf/struct.pb.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "tests/support/temp_dir.h"

namespace tandem::data::testing {

// The folder holding the TFRecord corpus (…/conformance/tfrecord): $TANDEM_CONFORMANCE_DIR
// (either the conformance folder or its tfrecord sub-folder), else ../shared/conformance
// beside the source tree, else the parent's sibling shared/. nullopt when none exists.
std::optional<std::filesystem::path> conformance_dir();
inline constexpr const char* kNoCorpus =
    "TFRecord conformance corpus not found: set TANDEM_CONFORMANCE_DIR or place it at ../shared/conformance";

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  std::string hex();  // finishes

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view bytes);
std::string base64_decode(std::string_view text);
std::string read_file(const std::filesystem::path& path);
void write_file(const std::filesystem::path& path, std::string_view bytes);

// Parses manifest.json into a google.protobuf.Struct (numbers become doubles).
google::protobuf::Struct load_manifest(const std::filesystem::path& corpus);

using ::tandem::testing::TempDir;

}  // namespace tandem::data::testing
