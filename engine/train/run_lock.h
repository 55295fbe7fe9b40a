// One trainer per run directory: an flock'ed file, DIR/.tandem.lock, naming its holder's host and
// pid. A second trainer on the same directory stops with a message naming the holder, instead of
// interleaving metrics rows and mixing checkpoints of two runs. The kernel releases the lock when
// its process dies, however it dies; a lock file that still names a holder but is not locked is
// stale and is taken over with a warning.
#pragma once

#include <filesystem>
#include <string>

namespace tandem::train {

class RunDirectoryLock {
 public:
  // Locks dir (created if missing); FailedPrecondition naming the holder when another process (or
  // another lock in this one) holds it.
  explicit RunDirectoryLock(const std::filesystem::path& dir);
  ~RunDirectoryLock();  // clears the file's holder line and releases the lock
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The holder line a dead process left behind, when this lock took it over; "" otherwise.
  const std::string& stale_holder() const { return stale_holder_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::string stale_holder_;
};

}  // namespace tandem::train
