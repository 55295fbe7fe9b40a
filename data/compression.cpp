// Compression names and detection. TensorFlow never guesses (compression_type must be given);
// `auto` is ours, and a stated type that the bytes contradict gets a warning, not a guess.
#include "data/compression.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "data/crc32c.h"
#include "engine/core/error.h"

namespace tandem::data {

std::string_view compression_name(Compression c) {
  switch (c) {
    case Compression::kNone: return "none";
    case Compression::kGzip: return "gzip";
    case Compression::kZlib: return "zlib";
    case Compression::kAuto: return "auto";
  }
  return "none";
}

Compression parse_compression(std::string_view name) {
  if (name == "none" || name.empty() || name == "NONE") return Compression::kNone;
  if (name == "gzip" || name == "GZIP") return Compression::kGzip;
  if (name == "zlib" || name == "ZLIB") return Compression::kZlib;
  if (name == "auto" || name == "AUTO") return Compression::kAuto;
  throw_error(ErrorCode::kInvalidArgument, "unknown compression '{}': use auto, none, gzip or zlib", name);
}

namespace {

bool valid_record_header(const unsigned char* head, size_t size) {
  if (size < 12) return false;
  uint32_t stored = 0;
  std::memcpy(&stored, head + 8, 4);
  return unmask_crc(stored) == crc32c(head, 8);
}

// RFC 1950: CMF's low nibble 8 (deflate), window at most 32K, and CMF*256+FLG divisible by 31.
bool zlib_magic(const unsigned char* head, size_t size) {
  if (size < 2) return false;
  return (head[0] & 0x0f) == 8 && (head[0] >> 4) <= 7 && ((head[0] << 8) | head[1]) % 31 == 0;
}

}  // namespace

Compression detect_compression(const unsigned char* head, size_t size) {
  if (size == 0 || valid_record_header(head, size)) return Compression::kNone;
  if (size >= 2 && head[0] == 0x1f && head[1] == 0x8b) return Compression::kGzip;
  if (zlib_magic(head, size)) return Compression::kZlib;
  return Compression::kNone;
}

void check_regular_file(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return;
  const char* kind = S_ISFIFO(st.st_mode)  ? "a pipe (FIFO)"
                     : S_ISDIR(st.st_mode) ? "a directory"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  throw_error(ErrorCode::kInvalidArgument,
              "{} is {}: TFRecord files are opened more than once (to detect compression, then to read, and again "
              "each epoch), which a stream cannot give; write the records to a regular file first",
              path, kind);
}

Compression detect_file_compression(const std::string& path, bool* certain) {
  check_regular_file(path);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  TANDEM_CHECK(f != nullptr, ErrorCode::kNotFound, "cannot open {}: {}", path, std::strerror(errno));
  unsigned char head[12];
  size_t got = std::fread(head, 1, sizeof(head), f);
  std::fclose(f);
  Compression c = detect_compression(head, got);
  if (certain != nullptr) *certain = c != Compression::kNone || got == 0 || valid_record_header(head, got);
  return c;
}

}  // namespace tandem::data
