// TFRecordWriter: writes TFRecord framing to one file, optionally through one whole-file
// GZIP or ZLIB stream, as TensorFlow's RecordWriter does.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/compression.h"

namespace tandem::data {

struct TFRecordWriterOptions {
  Compression compression = Compression::kNone;  // kAuto is not allowed here
  int level = Z_DEFAULT_COMPRESSION;
  size_t buffer_size = 256 * 1024;
};

// An open file for TFRecordWriter to write into: a duplicate of `fd` is taken, so the owner (an
// OutputFile that renames the finished file into place) keeps its own descriptor.
struct TFRecordWriteFd {
  int fd = -1;
};

class TFRecordWriter {
 public:
  TFRecordWriter(std::string path, TFRecordWriterOptions options = {});
  // Writes into an open file; `name` is the path its messages give.
  TFRecordWriter(TFRecordWriteFd fd, std::string name, TFRecordWriterOptions options = {});
  ~TFRecordWriter();  // closes; a failure there is logged, never thrown
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  void write(std::string_view record);
  // Pushes every record written so far to the file (a sync flush of the compressor first), so
  // a reader following the file (TensorBoard) sees them; the file stays open. Not an fsync.
  void flush();
  // Flushes the compressor and the file and closes it; throws on an I/O error.
  void close();

  uint64_t records_written() const { return records_; }
  uint64_t bytes_written() const { return file_bytes_; }  // bytes in the file (compressed)
  uint64_t offset() const { return stream_bytes_; }      // uncompressed bytes so far

 private:
  void start_stream();
  void put(const void* bytes, size_t size);
  void deflate_out(int flush);
  void flush_file();

  std::string path_;
  TFRecordWriterOptions options_;
  int fd_ = -1;
  std::vector<char> buffer_;  // bytes waiting for the file
  size_t used_ = 0;
  z_stream zs_{};
  bool z_open_ = false;
  uint64_t records_ = 0;
  uint64_t file_bytes_ = 0;
  uint64_t stream_bytes_ = 0;
};

// The framed bytes of one record (header, data, footer), for tests and in-memory use.
std::string frame_record(std::string_view record);

}  // namespace tandem::data
