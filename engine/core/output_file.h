// Replacing a file the safe way, for every writer of the project (checkpoints, exports, converted
// shards, indexes, reports): the new content goes to a temporary file with a unique name beside
// the target, created exclusively (O_EXCL, so a planted symlink or file is never followed or
// truncated), is fsynced and renamed over the target, and the folder is fsynced. Only a missing
// path or a regular file is ever replaced: a directory, FIFO, device, socket or symlink at the
// target is refused before anything is written, so `--output /dev/null` never turns the machine's
// /dev/null into a regular file. A failure at any point removes the temporary file.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "engine/core/error.h"

namespace tandem {

// A failed file call's errno as an ErrorCode: ResourceExhausted for a full disk, a quota or a file
// size limit; NotFound; FailedPrecondition for permissions and read-only file systems; else Unavailable.
ErrorCode error_code_for_errno(int err);

// Throws InvalidArgument unless `path` names a file that may be replaced: not empty, not ending in
// a separator, and either absent or a regular file (lstat: a symlink is refused, not followed).
// `what` names the writer in the message ("export", "checkpoint").
void check_replaceable_output(const std::filesystem::path& path, std::string_view what);

class OutputFile {
 public:
  // Checks the target, then creates ".<name>.tmp-XXXXXX" beside it, with the target's permissions
  // when it exists and 0666 less the umask when it does not.
  OutputFile(std::filesystem::path target, std::string_view what);
  ~OutputFile();  // removes the temporary file unless commit() succeeded; never throws
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // The temporary file's descriptor, for writers that stream (TFRecordWriter adopts a dup of it).
  int fd() const { return fd_; }
  const std::filesystem::path& temp_path() const { return temp_; }
  const std::filesystem::path& target() const { return target_; }

  void write(const void* data, size_t bytes);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // fsync, close, check the target again, rename over it, fsync the folder.
  void commit();

 private:
  std::filesystem::path target_;
  std::string what_;
  std::filesystem::path temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// The whole content at once: OutputFile, write, commit.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, std::string_view what);

}  // namespace tandem
