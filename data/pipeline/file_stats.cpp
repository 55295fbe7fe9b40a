// File sizes and record counts for the sharding plan. Counting hops over record headers in
// uncompressed files (one small read per record), so planning costs little beside training.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "data/compression.h"
#include "data/pipeline/sharding.h"
#include "data/tfrecord_reader.h"
#include "engine/core/error.h"

namespace tandem::data {
namespace {

class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    TANDEM_CHECK(fd_ >= 0, ErrorCode::kNotFound, "open {}: {}", path, std::strerror(errno));
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int64_t count_uncompressed(const std::string& path, uint64_t size, bool strict) {
  Fd fd(path);
  int64_t records = 0;
  uint64_t offset = 0;
  while (offset + 12 <= size) {
    unsigned char header[8];
    ssize_t got = ::pread(fd.get(), header, sizeof header, static_cast<off_t>(offset));
    TANDEM_CHECK(got == 8, ErrorCode::kDataLoss, "{}: truncated record at {}", path, offset);
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | header[i];
    // A damaged length must not wrap the offset around. Under on_corrupt: fail the damage is the
    // error now, as the reader would give it (not a count that looks like too few records).
    if (length > size - offset - 12 || size - offset - 12 - length < 4) {
      TANDEM_CHECK(!strict, ErrorCode::kDataLoss,
                   "truncated record at {} in {} (record {}): the record says {} data bytes; the file ends first "
                   "(`trainer inspect {}` shows the damage; data.on_corrupt: skip trains on the records before it)",
                   offset, path, records, length, path);
      break;
    }
    offset += 16 + length;
    ++records;
  }
  TANDEM_CHECK(!strict || offset == size, ErrorCode::kDataLoss,
               "truncated record at {} in {} (record {}): {} bytes left where a 12-byte header starts "
               "(`trainer inspect {}` shows the damage; data.on_corrupt: skip trains on the records before it)",
               offset, path, records, size - offset, path);
  return records;
}

}  // namespace

int64_t count_records(const std::string& path, bool strict, uint64_t max_record_bytes) {
  struct stat st {};
  TANDEM_CHECK(::stat(path.c_str(), &st) == 0, ErrorCode::kNotFound, "stat {}: {}", path, std::strerror(errno));
  if (detect_file_compression(path) == Compression::kNone) {
    return count_uncompressed(path, static_cast<uint64_t>(st.st_size), strict);
  }
  TFRecordReaderOptions options;
  options.verify_crc = false;
  options.on_corrupt = strict ? OnCorrupt::kFail : OnCorrupt::kSkip;
  options.max_record_bytes = max_record_bytes;
  TFRecordReader reader(path, options);
  std::string_view record;
  int64_t records = 0;
  while (reader.next(&record)) ++records;
  return records;
}

std::vector<ShardFile> describe_files(const std::vector<std::string>& paths, bool count, bool strict,
                                      uint64_t max_record_bytes) {
  std::vector<ShardFile> files;
  for (const std::string& path : paths) {
    struct stat st {};
    TANDEM_CHECK(::stat(path.c_str(), &st) == 0, ErrorCode::kNotFound, "stat {}: {}", path, std::strerror(errno));
    const int64_t records = count ? count_records(path, strict, max_record_bytes) : -1;
    files.push_back({path, static_cast<uint64_t>(st.st_size), records});
  }
  return files;
}

}  // namespace tandem::data
