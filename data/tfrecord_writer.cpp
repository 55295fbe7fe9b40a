// TFRecordWriter. GZIP uses window bits 15+16 and memLevel 9, TensorFlow's ZlibOutputBuffer
// settings; compressed bytes go through the same buffer as plain ones.
#include "data/tfrecord_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "data/crc32c.h"
#include "engine/core/error.h"

namespace tandem::data {

namespace {

void encode_header(uint64_t length, char* header) {
  std::memcpy(header, &length, 8);
  uint32_t crc = mask_crc(crc32c(header, 8));
  std::memcpy(header + 8, &crc, 4);
}

}  // namespace

std::string frame_record(std::string_view record) {
  std::string out(12 + record.size() + 4, '\0');
  encode_header(record.size(), out.data());
  std::memcpy(out.data() + 12, record.data(), record.size());
  uint32_t crc = mask_crc(crc32c(record));
  std::memcpy(out.data() + 12 + record.size(), &crc, 4);
  return out;
}

TFRecordWriter::TFRecordWriter(std::string path, TFRecordWriterOptions options)
    : path_(std::move(path)), options_(options), buffer_(options.buffer_size) {
  TANDEM_CHECK(options_.compression != Compression::kAuto, ErrorCode::kInvalidArgument,
               "TFRecordWriter for {}: state the compression (none, gzip or zlib), not auto", path_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TANDEM_CHECK(fd_ >= 0, ErrorCode::kNotFound, "cannot create {}: {}", path_, std::strerror(errno));
  start_stream();  // closes fd_ if it throws: no destructor runs for a constructor that throws
}

TFRecordWriter::TFRecordWriter(TFRecordWriteFd fd, std::string name, TFRecordWriterOptions options)
    : path_(std::move(name)), options_(options), buffer_(options.buffer_size) {
  TANDEM_CHECK(options_.compression != Compression::kAuto, ErrorCode::kInvalidArgument,
               "TFRecordWriter for {}: state the compression (none, gzip or zlib), not auto", path_);
  fd_ = ::fcntl(fd.fd, F_DUPFD_CLOEXEC, 0);
  TANDEM_CHECK(fd_ >= 0, ErrorCode::kUnavailable, "TFRecordWriter for {}: dup of descriptor {} failed: {}", path_,
               fd.fd, std::strerror(errno));
  start_stream();
}

void TFRecordWriter::start_stream() {
  if (options_.compression != Compression::kNone) {
    int window = options_.compression == Compression::kGzip ? MAX_WBITS + 16 : MAX_WBITS;
    int rc = deflateInit2(&zs_, options_.level, Z_DEFLATED, window, 9, Z_DEFAULT_STRATEGY);
    if (rc != Z_OK) {
      ::close(fd_);
      fd_ = -1;
      throw_error(ErrorCode::kInternal, "deflateInit2(level {}, window {}) for {} failed: {}", options_.level, window,
                  path_, rc);
    }
    z_open_ = true;
  }
}

TFRecordWriter::~TFRecordWriter() {
  if (fd_ < 0) return;
  try {
    close();
  } catch (const Error& e) {
    spdlog::error("closing {}: {}", path_, e.what());
  }
}

void TFRecordWriter::flush_file() {
  size_t done = 0;
  while (done < used_) {
    ssize_t n = ::write(fd_, buffer_.data() + done, used_ - done);
    if (n < 0 && errno == EINTR) continue;
    TANDEM_CHECK(n > 0, ErrorCode::kResourceExhausted, "write to {} failed after {} bytes: {}", path_, file_bytes_,
                 std::strerror(errno));
    done += static_cast<size_t>(n);
    file_bytes_ += static_cast<uint64_t>(n);
  }
  used_ = 0;
}

void TFRecordWriter::deflate_out(int flush) {
  for (;;) {
    if (used_ == buffer_.size()) flush_file();
    zs_.next_out = reinterpret_cast<Bytef*>(buffer_.data() + used_);
    zs_.avail_out = static_cast<uInt>(buffer_.size() - used_);
    int rc = deflate(&zs_, flush);
    TANDEM_CHECK(rc != Z_STREAM_ERROR, ErrorCode::kInternal, "deflate for {} failed", path_);
    used_ = buffer_.size() - zs_.avail_out;
    if (flush == Z_FINISH ? rc == Z_STREAM_END : (zs_.avail_in == 0 && zs_.avail_out > 0)) return;
  }
}

void TFRecordWriter::put(const void* bytes, size_t size) {
  stream_bytes_ += size;
  if (!z_open_) {
    const char* p = static_cast<const char*>(bytes);
    while (size > 0) {
      if (used_ == buffer_.size()) flush_file();
      size_t take = std::min(size, buffer_.size() - used_);
      std::memcpy(buffer_.data() + used_, p, take);
      used_ += take;
      p += take;
      size -= take;
    }
    return;
  }
  zs_.next_in = static_cast<Bytef*>(const_cast<void*>(bytes));
  zs_.avail_in = static_cast<uInt>(size);
  deflate_out(Z_NO_FLUSH);
}

void TFRecordWriter::write(std::string_view record) {
  TANDEM_CHECK(fd_ >= 0, ErrorCode::kFailedPrecondition, "write to {} after close", path_);
  char header[12];
  encode_header(record.size(), header);
  uint32_t crc = mask_crc(crc32c(record));
  put(header, sizeof(header));
  // zlib takes at most 4 GiB per call; records above that go in pieces.
  for (size_t done = 0; done < record.size();) {
    size_t take = std::min<size_t>(record.size() - done, 1u << 30);
    put(record.data() + done, take);
    done += take;
  }
  put(&crc, sizeof(crc));
  ++records_;
}

void TFRecordWriter::flush() {
  TANDEM_CHECK(fd_ >= 0, ErrorCode::kFailedPrecondition, "flush of {} after close", path_);
  if (z_open_) {
    zs_.next_in = nullptr;
    zs_.avail_in = 0;
    deflate_out(Z_SYNC_FLUSH);
  }
  flush_file();
}

void TFRecordWriter::close() {
  if (fd_ < 0) return;
  if (z_open_) {
    zs_.next_in = nullptr;
    zs_.avail_in = 0;
    deflate_out(Z_FINISH);
    deflateEnd(&zs_);
    z_open_ = false;
  }
  flush_file();
  int fd = fd_;
  fd_ = -1;
  TANDEM_CHECK(::close(fd) == 0, ErrorCode::kResourceExhausted, "close of {} failed: {}", path_, std::strerror(errno));
}

}  // namespace tandem::data
