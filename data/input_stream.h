// A buffered byte stream over one file, inflating GZIP or ZLIB on the fly, that tracks the
// offset in the uncompressed stream (the offset TFRecord errors report).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/compression.h"

namespace tandem::data {

class InputStream {
 public:
  // compression must be resolved (not kAuto). Throws kNotFound when the file cannot be opened.
  InputStream(std::string path, Compression compression, size_t buffer_size = 256 * 1024);
  ~InputStream();
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;

  // Reads up to n bytes; fewer only at the end of the stream. Throws kDataLoss when the
  // compressed stream is damaged or ends early.
  size_t read(char* dst, size_t n);

  // Moves to an offset of an uncompressed file (index-based seeking); kFailedPrecondition otherwise.
  void seek(uint64_t offset);

  uint64_t offset() const { return offset_; }
  // Bytes of the file itself, for uncompressed files; nullopt when compressed.
  std::optional<uint64_t> file_size() const;
  const std::string& path() const { return path_; }
  Compression compression() const { return compression_; }

 private:
  size_t read_raw(char* dst, size_t n);  // from the file through in_
  bool fill_raw();                       // refills in_; false at end of file
  bool fill_inflated();                  // refills out_; false at end of stream
  void reset_inflate();

  std::string path_;
  Compression compression_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint64_t offset_ = 0;      // uncompressed bytes handed out so far
  uint64_t raw_offset_ = 0;  // file bytes read into in_ so far
  std::vector<char> in_;
  size_t in_pos_ = 0, in_end_ = 0;
  bool raw_eof_ = false;
  std::vector<char> out_;
  size_t out_pos_ = 0, out_end_ = 0;
  z_stream zs_{};
  bool z_open_ = false;
  bool z_ended_ = false;
};

}  // namespace tandem::data
