// Checked POSIX calls behind checkpoint writes and reads. EINTR is retried; short writes and
// reads loop; every other failure throws with the call, the path and strerror.
#include "engine/train/checkpoint/posix.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <system_error>

#include "engine/core/error.h"
#include "engine/core/output_file.h"

namespace tandem::train::posix {
namespace {

int open_checked(const std::filesystem::path& path, int flags, std::string_view what) {
  for (;;) {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EINTR) throw_errno(what, path, errno);
  }
}

}  // namespace

[[noreturn]] void throw_errno(std::string_view call, const std::filesystem::path& path, int err) {
  throw_error(error_code_for_errno(err), "{} '{}' failed: {} (errno {})", call, path.string(),
              std::system_category().message(err), err);
}

File File::open_read(const std::filesystem::path& path) {
  return File(open_checked(path, O_RDONLY, "open for reading"), path);
}

File File::open_directory(const std::filesystem::path& path) {
  return File(open_checked(path, O_RDONLY | O_DIRECTORY, "open directory"), path);
}

File::File(File&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

File::~File() {
  // Reached on error paths only (success calls close()); the first error is already in flight.
  if (fd_ >= 0 && ::close(fd_) != 0) {
    spdlog::debug("close '{}' failed: {}", path_.string(), std::system_category().message(errno));
  }
}

uint64_t File::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw_errno("fstat", path_, errno);
  return static_cast<uint64_t>(st.st_size);
}

void File::read_at(void* data, size_t bytes, uint64_t offset) const {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("read", path_, errno);
    }
    TANDEM_CHECK(n > 0, ErrorCode::kDataLoss, "'{}' is truncated: it ends at byte {}, {} bytes short",
                 path_.string(), offset, bytes);
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

void File::sync() {
  if (::fsync(fd_) != 0) throw_errno("fsync", path_, errno);
}

void File::close() {
  int fd = fd_;
  fd_ = -1;
  // POSIX leaves the descriptor state unspecified after EINTR from close; Linux has closed it.
  if (fd >= 0 && ::close(fd) != 0 && errno != EINTR) throw_errno("close", path_, errno);
}

void sync_directory(const std::filesystem::path& dir) {
  File d = File::open_directory(dir);
  d.sync();
  d.close();
}

void rename_path(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    int err = errno;
    throw_error(error_code_for_errno(err), "rename '{}' to '{}' failed: {} (errno {})", from.string(), to.string(),
                std::system_category().message(err), err);
  }
}

void exchange_paths(const std::filesystem::path& a, const std::filesystem::path& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
    int err = errno;
    throw_error(error_code_for_errno(err), "renameat2(RENAME_EXCHANGE) '{}' with '{}' failed: {} (errno {})", a.string(),
                b.string(), std::system_category().message(err), err);
  }
}

}  // namespace tandem::train::posix
