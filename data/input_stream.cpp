// InputStream: one read buffer for the file, one for inflated bytes. GZIP files made by
// concatenating members (as `cat a.gz b.gz` does) read as one stream, like gzip -d.
#include "data/input_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "data/compression.h"
#include "engine/core/error.h"

namespace tandem::data {

InputStream::InputStream(std::string path, Compression compression, size_t buffer_size)
    : path_(std::move(path)), compression_(compression), in_(buffer_size) {
  TANDEM_CHECK(compression != Compression::kAuto, ErrorCode::kInternal, "InputStream needs a resolved compression");
  check_regular_file(path_);  // opening a FIFO with no writer would block for ever
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  TANDEM_CHECK(fd_ >= 0, ErrorCode::kNotFound, "cannot open {}: {}", path_, std::strerror(errno));
  struct stat st{};
  if (::fstat(fd_, &st) == 0) file_size_ = static_cast<uint64_t>(st.st_size);
  if (compression_ != Compression::kNone) {
    out_.resize(buffer_size);
    reset_inflate();
  }
}

InputStream::~InputStream() {
  if (z_open_) inflateEnd(&zs_);
  if (fd_ >= 0) ::close(fd_);
}

void InputStream::reset_inflate() {
  if (z_open_) inflateEnd(&zs_);
  zs_ = z_stream{};
  int window = compression_ == Compression::kGzip ? MAX_WBITS + 16 : MAX_WBITS;
  int rc = inflateInit2(&zs_, window);
  TANDEM_CHECK(rc == Z_OK, ErrorCode::kInternal, "inflateInit2({}) failed for {}: {}", window, path_, rc);
  z_open_ = true;
  z_ended_ = false;
}

std::optional<uint64_t> InputStream::file_size() const {
  if (compression_ != Compression::kNone) return std::nullopt;
  return file_size_;
}

bool InputStream::fill_raw() {
  if (raw_eof_) return false;
  for (;;) {
    ssize_t got = ::read(fd_, in_.data(), in_.size());
    if (got < 0 && errno == EINTR) continue;
    TANDEM_CHECK(got >= 0, ErrorCode::kDataLoss, "read of {} failed at file offset {}: {}", path_, raw_offset_,
                 std::strerror(errno));
    in_pos_ = 0;
    in_end_ = static_cast<size_t>(got);
    raw_offset_ += in_end_;
    if (got == 0) raw_eof_ = true;
    return got > 0;
  }
}

size_t InputStream::read_raw(char* dst, size_t n) {
  size_t done = 0;
  while (done < n) {
    if (in_pos_ == in_end_) {
      // A large request skips the buffer: one copy fewer for big records.
      if (n - done >= in_.size()) {
        ssize_t got = ::read(fd_, dst + done, n - done);
        if (got < 0 && errno == EINTR) continue;
        TANDEM_CHECK(got >= 0, ErrorCode::kDataLoss, "read of {} failed at file offset {}: {}", path_, raw_offset_,
                     std::strerror(errno));
        if (got == 0) {
          raw_eof_ = true;
          break;
        }
        raw_offset_ += static_cast<uint64_t>(got);
        done += static_cast<size_t>(got);
        continue;
      }
      if (!fill_raw()) break;
    }
    size_t take = std::min(n - done, in_end_ - in_pos_);
    std::memcpy(dst + done, in_.data() + in_pos_, take);
    in_pos_ += take;
    done += take;
  }
  return done;
}

bool InputStream::fill_inflated() {
  const char* kind = compression_ == Compression::kGzip ? "gzip" : "zlib";
  for (;;) {
    if (zs_.avail_in == 0 && in_pos_ == in_end_ && !fill_raw()) {
      if (z_ended_) return false;
      throw_error(ErrorCode::kDataLoss, "truncated {} stream in {}: the compressed data ends at file offset {} "
                  "before the stream does (uncompressed offset {})", kind, path_, raw_offset_, offset_);
    }
    if (zs_.avail_in == 0) {
      zs_.next_in = reinterpret_cast<Bytef*>(in_.data() + in_pos_);
      zs_.avail_in = static_cast<uInt>(in_end_ - in_pos_);
      in_pos_ = in_end_;
    }
    if (z_ended_) {
      // More bytes after a finished stream: another gzip member, or trailing garbage.
      TANDEM_CHECK(compression_ == Compression::kGzip, ErrorCode::kDataLoss,
                   "corrupted zlib stream in {}: {} unexpected bytes after the end of the stream", path_, zs_.avail_in);
      Bytef* next = zs_.next_in;
      uInt avail = zs_.avail_in;
      reset_inflate();
      zs_.next_in = next;
      zs_.avail_in = avail;
    }
    zs_.next_out = reinterpret_cast<Bytef*>(out_.data());
    zs_.avail_out = static_cast<uInt>(out_.size());
    int rc = inflate(&zs_, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      z_ended_ = true;
    } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && zs_.avail_in == 0)) {
      uint64_t at = raw_offset_ - (in_end_ - in_pos_) - zs_.avail_in;
      throw_error(ErrorCode::kDataLoss, "corrupted {} stream in {} at file offset {} (uncompressed offset {}): {}", kind,
                  path_, at, offset_, zs_.msg != nullptr ? zs_.msg : "inflate error");
    }
    out_pos_ = 0;
    out_end_ = out_.size() - zs_.avail_out;
    if (out_end_ > 0) return true;
  }
}

size_t InputStream::read(char* dst, size_t n) {
  size_t done = 0;
  if (compression_ == Compression::kNone) {
    done = read_raw(dst, n);
  } else {
    while (done < n) {
      if (out_pos_ == out_end_ && !fill_inflated()) break;
      size_t take = std::min(n - done, out_end_ - out_pos_);
      std::memcpy(dst + done, out_.data() + out_pos_, take);
      out_pos_ += take;
      done += take;
    }
  }
  offset_ += done;
  return done;
}

void InputStream::seek(uint64_t offset) {
  TANDEM_CHECK(compression_ == Compression::kNone, ErrorCode::kFailedPrecondition,
               "cannot seek in {}: it is {}-compressed; seeking needs an uncompressed file", path_,
               compression_name(compression_));
  TANDEM_CHECK(offset <= file_size_, ErrorCode::kOutOfRange, "seek to {} past the end of {} ({} bytes)", offset, path_,
               file_size_);
  off_t pos = ::lseek(fd_, static_cast<off_t>(offset), SEEK_SET);
  TANDEM_CHECK(pos >= 0, ErrorCode::kDataLoss, "lseek({}) in {} failed: {}", offset, path_, std::strerror(errno));
  in_pos_ = in_end_ = 0;
  raw_eof_ = false;
  raw_offset_ = offset;
  offset_ = offset;
}

}  // namespace tandem::data
