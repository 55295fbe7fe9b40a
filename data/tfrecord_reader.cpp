// TFRecordReader. Record layout: uint64 length, uint32 masked CRC32C(length), data,
// uint32 masked CRC32C(data), little-endian. Faults follow record_reader.cc: no bytes left
// is a clean end; a partial header or short data/footer is truncation; a CRC mismatch is corruption.
#include "data/tfrecord_reader.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "data/crc32c.h"
#include "engine/core/error.h"

namespace tandem::data {

namespace {

uint64_t load_u64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only, as TensorFlow's own reader on x86 and ARM
}

uint32_t load_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Thrown by fail() so next() can tell framing faults from compression-layer errors.
struct FramingFault : Error {
  using Error::Error;
};

}  // namespace

std::string_view on_corrupt_name(OnCorrupt policy) {
  switch (policy) {
    case OnCorrupt::kFail: return "fail";
    case OnCorrupt::kSkip: return "skip";
    case OnCorrupt::kQuarantine: return "quarantine";
  }
  return "fail";
}

OnCorrupt parse_on_corrupt(std::string_view name) {
  if (name == "fail") return OnCorrupt::kFail;
  if (name == "skip") return OnCorrupt::kSkip;
  if (name == "quarantine") return OnCorrupt::kQuarantine;
  throw_error(ErrorCode::kInvalidArgument, "on_corrupt: unknown policy '{}': use fail, skip or quarantine", name);
}

Compression resolve_compression(const std::string& path, Compression stated) {
  bool certain = false;
  Compression detected = detect_file_compression(path, &certain);
  if (stated == Compression::kAuto) return detected;
  if (stated != detected && certain) {
    spdlog::warn("{}: compression stated as {} but the bytes look {}; reading as {}", path, compression_name(stated),
                 compression_name(detected), compression_name(stated));
  }
  return stated;
}

TFRecordReader::TFRecordReader(std::string path, TFRecordReaderOptions options)
    : path_(std::move(path)), options_(std::move(options)) {
  Compression c = resolve_compression(path_, options_.compression);
  stream_ = std::make_unique<InputStream>(path_, c, options_.buffer_size);
}

TFRecordReader::~TFRecordReader() {
  if (quarantine_ != nullptr) std::fclose(quarantine_);
}

void TFRecordReader::fail(RecordFault::Kind kind, uint64_t offset, std::string_view detail) {
  std::string message =
      fmt::format("{} record at {} in {} (record {}): {}", kind == RecordFault::Kind::kTruncated ? "truncated" : "corrupted",
                  offset, path_, next_index_, detail);
  fault_ = RecordFault{kind, offset, next_index_, message};
  throw FramingFault(ErrorCode::kDataLoss, message);
}

bool TFRecordReader::read_payload(uint64_t length, uint64_t start) {
  if (auto size = stream_->file_size()) {
    // Known file size: a length past the end is truncation, decided without allocating it.
    if (*size < start + 16 || length > *size - start - 16) return false;
    if (buffer_.size() < length) buffer_.resize(length);
    return stream_->read(buffer_.data(), length) == length;
  }
  // Compressed: grow the buffer only as far as the stream really has bytes, so a damaged
  // length cannot make us allocate exabytes.
  uint64_t have = 0;
  while (have < length) {
    uint64_t want = std::min<uint64_t>(length - have, std::max<uint64_t>(have, 1 << 20));
    if (buffer_.size() < have + want) buffer_.resize(have + want);
    size_t got = stream_->read(buffer_.data() + have, want);
    have += got;
    if (got < want) return false;
  }
  return true;
}

bool TFRecordReader::read_one(std::string_view* record) {
  const uint64_t start = stream_->offset();
  char* header = header_;
  size_t got = stream_->read(header, sizeof(header_));
  header_size_ = got;
  if (got == 0) return false;
  if (got < sizeof(header_)) {
    fail(RecordFault::Kind::kTruncated, start, fmt::format("{} bytes left where a 12-byte header starts", got));
  }
  const uint64_t length = load_u64(header);
  if (options_.verify_crc) {
    // Both shown masked, as the file stores them, so they can be found in a hex dump.
    uint32_t stored = load_u32(header + 8);
    uint32_t computed = mask_crc(crc32c(header, 8));
    if (stored != computed) {
      fail(RecordFault::Kind::kCorrupted, start,
           fmt::format("length CRC mismatch: stored {:#010x}, computed {:#010x} (masked)", stored, computed));
    }
  }
  // An uncompressed file's size bounds a record (past the end is truncation); an inflated stream's does not.
  if (!stream_->file_size() && length > options_.max_record_bytes) {
    fail(RecordFault::Kind::kCorrupted, start,
         fmt::format("the record says {} data bytes, above the limit of {} MiB for a compressed file "
                     "(data.max_record_mb): a damaged length, or a record too large for a training pipeline",
                     length, options_.max_record_bytes >> 20));
  }
  if (!read_payload(length, start)) {
    fail(RecordFault::Kind::kTruncated, start,
         fmt::format("the record says {} data bytes; the file ends first", length));
  }
  char footer[4];
  if (stream_->read(footer, sizeof(footer)) != sizeof(footer)) {
    fail(RecordFault::Kind::kTruncated, start, "the file ends inside the 4-byte data CRC");
  }
  if (options_.verify_crc) {
    uint32_t stored = load_u32(footer);
    uint32_t computed = mask_crc(crc32c(buffer_.data(), length));
    if (stored != computed) {
      fail(RecordFault::Kind::kCorrupted, start + 12,
           fmt::format("data CRC mismatch: stored {:#010x}, computed {:#010x} (masked)", stored, computed));
    }
  }
  *record = std::string_view(buffer_.data(), length);
  return true;
}

namespace {

// Whether this process reports this damaged record (file, offset, fault) to `where` (the log, or a
// quarantine file) for the first time. Under record sharding every replica reads every file and so
// meets the same bad record, and every epoch meets it again: each place gets it once.
// forget: take the report back (a quarantine write that failed), so the next reader tries again.
bool first_report(const std::string& where, const std::string& path, uint64_t offset, const std::string& fault,
                  bool forget = false) {
  static std::mutex mutex;
  static std::set<std::tuple<std::string, std::string, uint64_t, std::string>> seen;
  std::lock_guard lock(mutex);
  if (forget) return seen.erase({where, path, offset, fault}) > 0;
  return seen.emplace(where, path, offset, fault).second;
}

}  // namespace

bool TFRecordReader::next(std::string_view* record) {
  while (!finished_) {
    const uint64_t start = stream_->offset();
    try {
      if (read_one(record)) {
        ++records_read_;
        ++next_index_;
        return true;
      }
      finished_ = true;
      return false;
    } catch (const FramingFault& e) {
      if (options_.on_corrupt == OnCorrupt::kFail) throw Error(e.code(), e.what());
      quarantine(e.what(), start);
      ++skipped_;
      ++next_index_;
      // After a data CRC fault the framing is intact and the next record follows; any other
      // fault leaves no trustworthy position, so the file ends there.
      bool data_fault = fault_->kind == RecordFault::Kind::kCorrupted && fault_->offset == start + 12;
      if (!data_fault) finished_ = true;
      if (first_report("log", path_, start, e.what())) {
        spdlog::warn("{}; {} record{} skipped so far", e.what(), skipped_, skipped_ == 1 ? "" : "s");
      }
    } catch (const Error& e) {
      // A damaged compressed stream: nothing after it can be trusted, under any policy.
      std::string message = fmt::format("{} (record {})", e.what(), next_index_);
      fault_ = RecordFault{RecordFault::Kind::kCompression, stream_->offset(), next_index_, message};
      finished_ = true;
      if (options_.on_corrupt == OnCorrupt::kFail) throw Error(ErrorCode::kDataLoss, message);
      ++skipped_;
      if (first_report("log", path_, fault_->offset, message)) {
        spdlog::warn("{}; the rest of the file is skipped", message);
      }
    }
  }
  return false;
}

void TFRecordReader::quarantine(const std::string& message, uint64_t start) {
  if (options_.on_corrupt != OnCorrupt::kQuarantine) return;
  const std::string side = options_.quarantine_path.empty() ? path_ + ".quarantine" : options_.quarantine_path;
  if (!first_report(side, path_, start, message)) return;
  if (quarantine_ == nullptr) {
    quarantine_ = std::fopen(side.c_str(), "ab");
    TANDEM_CHECK(quarantine_ != nullptr, ErrorCode::kNotFound, "cannot open quarantine file {}: {}", side,
                 std::strerror(errno));
  }
  // The bytes we hold of the bad record: its data for a data fault, else its header bytes.
  bool data_fault = fault_->kind == RecordFault::Kind::kCorrupted && fault_->offset == start + 12;
  const char* bytes = data_fault ? buffer_.data() : header_;
  uint64_t length = data_fault ? stream_->offset() - start - 16 : header_size_;
  bool ok = std::fprintf(quarantine_, "# offset=%llu record=%llu bytes=%llu reason=%s\n",
                         static_cast<unsigned long long>(start), static_cast<unsigned long long>(fault_->record),
                         static_cast<unsigned long long>(length), message.c_str()) > 0;
  ok = ok && (length == 0 || std::fwrite(bytes, 1, length, quarantine_) == length);
  ok = ok && std::fputc('\n', quarantine_) != EOF;
  ok = ok && std::fflush(quarantine_) == 0;
  // A record skipped without its copy kept would be lost without a word: stop instead.
  const int write_errno = errno;
  if (!ok) first_report(side, path_, start, message, /*forget=*/true);
  errno = write_errno;
  TANDEM_CHECK(ok, errno == ENOSPC || errno == EDQUOT ? ErrorCode::kResourceExhausted : ErrorCode::kDataLoss,
               "cannot write the quarantined record (offset {} of {}) to {}: {}; the record is not kept, so reading "
               "stops: free space there, set a quarantine path elsewhere, or use on_corrupt: skip to drop such "
               "records",
               start, path_, side, std::strerror(errno));
}

void TFRecordReader::seek(uint64_t index, uint64_t offset) {
  stream_->seek(offset);
  next_index_ = index;
  finished_ = false;
}

}  // namespace tandem::data
