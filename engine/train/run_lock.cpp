#include "engine/train/run_lock.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <system_error>

#include "engine/core/error.h"
#include "engine/train/checkpoint/posix.h"

namespace tandem::train {
namespace {

using posix::throw_errno;


std::string read_holder(int fd) {
  char buf[512];
  ssize_t n;
  do {
    n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  } while (n < 0 && errno == EINTR);
  std::string text(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

std::string holder_line() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return fmt::format("host {} pid {} since {}\n", host, ::getpid(), when);
}

}  // namespace

RunDirectoryLock::RunDirectoryLock(const std::filesystem::path& dir) : path_(dir / ".tandem.lock") {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_error(ErrorCode::kFailedPrecondition, "cannot create '{}': {}", dir.string(), ec.message());
  do {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) throw_errno("open", path_, errno);
  int rc;
  do {
    rc = ::flock(fd_, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    const std::string holder = read_holder(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK) {
      // Some network and parallel file systems (Lustre without -o flock, some NFS and FUSE mounts)
      // have no flock: run unlocked rather than not at all, and say so.
      spdlog::warn("{}: this file system does not support flock ({}): the run directory is not locked against "
                   "a second trainer",
                   path_.string(), std::system_category().message(err));
      return;
    }
    if (err != EWOULDBLOCK) throw_errno("flock", path_, err);
    throw_error(ErrorCode::kFailedPrecondition,
                "'{}' is in use by another trainer ({}): two runs in one directory would mix their metrics and "
                "checkpoints. Wait for it to end, stop it, or give this run another directory (--run-dir, "
                "checkpoint.dir)",
                dir.string(), holder.empty() ? "holder unknown" : holder);
  }
  stale_holder_ = read_holder(fd_);
  if (!stale_holder_.empty()) {
    spdlog::warn("{}: taking over a stale lock: its holder ({}) is gone", path_.string(), stale_holder_);
  }
  const std::string line = holder_line();
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw_errno("write", path_, err);
  }
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ < 0) return;
  // A cleared file tells the next trainer this run ended cleanly (no stale-lock warning).
  if (::ftruncate(fd_, 0) != 0) spdlog::warn("{}: could not clear the lock file", path_.string());
  ::close(fd_);  // releases the flock
}

}  // namespace tandem::train
