#include "engine/core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <system_error>
#include <vector>

#include "engine/core/error.h"

namespace tandem {

ErrorCode error_code_for_errno(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return ErrorCode::kResourceExhausted;
    case ENOENT:
    case ENOTDIR:
      return ErrorCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return ErrorCode::kFailedPrecondition;
    default:
      return ErrorCode::kUnavailable;
  }
}

namespace {

[[noreturn]] void throw_errno(std::string_view what, std::string_view call, const std::filesystem::path& path,
                              int err) {
  throw_error(error_code_for_errno(err), "{}: {} '{}' failed: {} (errno {})", what, call, path.string(),
              std::system_category().message(err), err);
}

std::string_view kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The process's umask, read without changing it (umask(2) sets it too, racing other threads).
mode_t process_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("Umask:")) return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
  }
  return 022;
}

// A replaced file keeps its permissions; a new one gets what open(path, O_CREAT, 0666) would give.
mode_t mode_for(const std::filesystem::path& target) {
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return st.st_mode & 07777;
  return 0666 & ~process_umask();
}

std::filesystem::path folder_of(const std::filesystem::path& path) {
  const std::filesystem::path dir = path.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

void sync_folder(const std::filesystem::path& dir, std::string_view what) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno(what, "open directory", dir, errno);
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  // Some file systems (FUSE, certain network mounts) cannot fsync a directory; the rename stands.
  if (!ok && err != EINVAL && err != ENOTSUP) throw_errno(what, "fsync directory", dir, err);
}

}  // namespace

void check_replaceable_output(const std::filesystem::path& path, std::string_view what) {
  TANDEM_CHECK(!path.empty(), ErrorCode::kInvalidArgument, "{}: the output path is empty: give a file name", what);
  TANDEM_CHECK(path.has_filename() && path.filename() != "." && path.filename() != "..",
               ErrorCode::kInvalidArgument, "{}: the output path '{}' names a folder, not a file: add a file name",
               what, path.string());
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw_errno(what, "lstat", path, errno);
  }
  TANDEM_CHECK(S_ISREG(st.st_mode), ErrorCode::kInvalidArgument,
               "{}: the output '{}' exists and is {}; Tandem replaces only regular files, so nothing was written: "
               "give the path of a new or regular file",
               what, path.string(), kind_of(st.st_mode));
}

OutputFile::OutputFile(std::filesystem::path target, std::string_view what)
    : target_(std::move(target)), what_(what) {
  check_replaceable_output(target_, what_);
  const std::filesystem::path pattern = folder_of(target_) / ("." + target_.filename().string() + ".tmp-XXXXXX");
  const std::string pattern_text = pattern.string();
  std::vector<char> name(pattern_text.c_str(), pattern_text.c_str() + pattern_text.size() + 1);
  // mkostemp creates with O_CREAT | O_EXCL: an existing name, symlinks included, is never opened.
  fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd_ < 0) throw_errno(what_, "create temporary file", pattern, errno);
  temp_ = name.data();
  if (::fchmod(fd_, mode_for(target_)) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    ::unlink(temp_.c_str());
    throw_errno(what_, "fchmod", temp_, err);
  }
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void OutputFile::write(const void* data, size_t bytes) {
  TANDEM_CHECK(fd_ >= 0, ErrorCode::kInternal, "{}: write to '{}' after commit", what_, temp_.string());
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(what_, "write", temp_, errno);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void OutputFile::commit() {
  TANDEM_CHECK(fd_ >= 0 && !committed_, ErrorCode::kInternal, "{}: '{}' committed twice", what_, target_.string());
  if (::fsync(fd_) != 0) throw_errno(what_, "fsync", temp_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) throw_errno(what_, "close", temp_, errno);
  // Again at the last moment: the target may have become a FIFO or a device since the start.
  check_replaceable_output(target_, what_);
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    const int err = errno;
    throw_error(error_code_for_errno(err), "{}: rename '{}' to '{}' failed: {} (errno {})", what_, temp_.string(),
                target_.string(), std::system_category().message(err), err);
  }
  committed_ = true;
  sync_folder(folder_of(target_), what_);
}

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, std::string_view what) {
  OutputFile file(path, what);
  file.write(bytes);
  file.commit();
}

}  // namespace tandem
