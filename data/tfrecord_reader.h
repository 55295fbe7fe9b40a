// TFRecordReader: reads the records of one TFRecord file (none, GZIP or ZLIB), checks both
// CRCs, and reports faults as TensorFlow does ("truncated record at OFFSET" / "corrupted
// record at OFFSET") with the path and record index; on_corrupt decides what happens next.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/compression.h"
#include "data/input_stream.h"

namespace tandem::data {

enum class OnCorrupt { kFail, kSkip, kQuarantine };
std::string_view on_corrupt_name(OnCorrupt policy);
OnCorrupt parse_on_corrupt(std::string_view name);  // fail | skip | quarantine

struct TFRecordReaderOptions {
  Compression compression = Compression::kAuto;
  bool verify_crc = true;
  OnCorrupt on_corrupt = OnCorrupt::kFail;
  std::string quarantine_path;  // default: <file>.quarantine
  size_t buffer_size = 256 * 1024;
  // In a compressed file, a record claiming more is a fault, not an allocation: a damaged length
  // (with its CRC intact) would otherwise buffer the whole inflated stream. (In an uncompressed
  // file the file's size bounds it: a length past the end is truncation.)
  uint64_t max_record_bytes = uint64_t{256} << 20;
};

// What went wrong, for callers that report it (inspect) rather than only print it.
struct RecordFault {
  enum class Kind { kTruncated, kCorrupted, kCompression };
  Kind kind;
  uint64_t offset;       // TensorFlow's offset: record start, or start + 12 for a data fault
  uint64_t record;       // index of the record that failed
  std::string message;   // the full message of the tandem::Error
};

class TFRecordReader {
 public:
  TFRecordReader(std::string path, TFRecordReaderOptions options = {});
  ~TFRecordReader();
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // Reads the next record into *record (a view of a buffer reused across calls, valid until
  // the next call). Returns false at the clean end of the file. A fault throws
  // tandem::Error(kDataLoss) under kFail; under kSkip/kQuarantine it is counted and reading
  // goes on where the framing allows (a header fault ends the file).
  bool next(std::string_view* record);

  // Positions the reader at record `index` starting at byte `offset` (from an index file).
  void seek(uint64_t index, uint64_t offset);

  Compression compression() const { return stream_->compression(); }
  const std::string& path() const { return path_; }
  uint64_t records_read() const { return records_read_; }  // delivered records
  uint64_t next_index() const { return next_index_; }      // index of the next record in the file
  uint64_t offset() const { return stream_->offset(); }   // uncompressed offset of the next record
  uint64_t skipped() const { return skipped_; }
  const std::optional<RecordFault>& fault() const { return fault_; }  // the last fault seen

 private:
  bool read_one(std::string_view* record);  // throws on any fault
  bool read_payload(uint64_t length, uint64_t start);
  [[noreturn]] void fail(RecordFault::Kind kind, uint64_t offset, std::string_view detail);
  void quarantine(const std::string& message, uint64_t start);

  std::string path_;
  TFRecordReaderOptions options_;
  std::unique_ptr<InputStream> stream_;
  std::vector<char> buffer_;  // the record buffer, reused
  char header_[12] = {};
  size_t header_size_ = 0;
  uint64_t records_read_ = 0;
  uint64_t next_index_ = 0;
  uint64_t skipped_ = 0;
  bool finished_ = false;
  std::optional<RecordFault> fault_;
  std::FILE* quarantine_ = nullptr;
};

// Resolves kAuto for a file and warns (spdlog) when a stated compression disagrees with the bytes.
Compression resolve_compression(const std::string& path, Compression stated);

}  // namespace tandem::data
