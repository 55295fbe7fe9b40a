// Checked POSIX file calls for checkpoints: an RAII file descriptor with positioned reads and fsync,
// and the directory fsync and rename calls that make a save atomic (files themselves are written
// through engine/core/output_file.h). Every failure
// is a tandem::Error carrying the call, the path and the errno text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>

namespace tandem::train::posix {

class File {
 public:
  static File open_read(const std::filesystem::path& path);
  // A directory opened only so it can be fsynced (its entries made durable).
  static File open_directory(const std::filesystem::path& path);

  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();  // closes without throwing; call close() to see the error

  const std::filesystem::path& path() const { return path_; }
  uint64_t size() const;
  // Reads exactly bytes at offset; a file that ends first is DataLoss naming the offset.
  void read_at(void* data, size_t bytes, uint64_t offset) const;
  void sync();
  // Closes and reports the error some file systems only give here (NFS, quota).
  void close();

 private:
  File(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::filesystem::path path_;
};

// A failed system call as tandem::Error: ResourceExhausted for a full disk, quota or file-size
// limit, NotFound, FailedPrecondition for permissions, Unavailable otherwise; names the call,
// the path and errno's text.
[[noreturn]] void throw_errno(std::string_view call, const std::filesystem::path& path, int err);

// fsync of a directory, so a rename or a new entry in it survives a power loss.
void sync_directory(const std::filesystem::path& dir);
// rename(2); to must not be a non-empty directory.
void rename_path(const std::filesystem::path& from, const std::filesystem::path& to);
// Swaps two existing paths in one step (renameat2 RENAME_EXCHANGE), so replacing a directory
// never leaves a moment with neither.
void exchange_paths(const std::filesystem::path& a, const std::filesystem::path& b);

}  // namespace tandem::train::posix
