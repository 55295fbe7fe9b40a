// std::filesystem with error_code overloads, each failure rethrown as tandem::Error naming the
// call and path; the error_code's category message is the errno text.
#include "engine/train/checkpoint/fs.h"

#include <system_error>

#include "engine/core/error.h"
#include "engine/train/checkpoint/posix.h"

namespace tandem::train::fs {
namespace {

ErrorCode code_for(const std::error_code& ec) {
  if (ec == std::errc::no_space_on_device || ec == std::errc::file_too_large) return ErrorCode::kResourceExhausted;
  if (ec == std::errc::no_such_file_or_directory) return ErrorCode::kNotFound;
  // Not ours to fix by retrying: no right to write there, or a file where a folder must be.
  if (ec == std::errc::permission_denied || ec == std::errc::operation_not_permitted ||
      ec == std::errc::read_only_file_system || ec == std::errc::not_a_directory || ec == std::errc::file_exists) {
    return ErrorCode::kFailedPrecondition;
  }
  return ErrorCode::kUnavailable;
}

void check(const std::error_code& ec, std::string_view call, const std::filesystem::path& path) {
  if (ec) throw_error(code_for(ec), "{} '{}' failed: {} (errno {})", call, path.string(), ec.message(), ec.value());
}

}  // namespace

void create_directories(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(ec, "create directories", dir);
}

void create_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  bool created = std::filesystem::create_directory(dir, ec);
  check(ec, "create directory", dir);
  TANDEM_CHECK(created, ErrorCode::kFailedPrecondition, "create directory '{}': it already exists", dir.string());
}

void remove_all(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  check(ec, "remove", path);
}

bool remove_all_noexcept(const std::filesystem::path& path) noexcept {
  std::error_code ec;
  return std::filesystem::remove_all(path, ec) > 0 && !ec;
}

bool exists(const std::filesystem::path& path) {
  std::error_code ec;
  bool found = std::filesystem::exists(path, ec);
  check(ec, "stat", path);
  return found;
}

bool is_directory(const std::filesystem::path& path) {
  std::error_code ec;
  bool dir = std::filesystem::is_directory(path, ec);
  if (ec == std::errc::no_such_file_or_directory) return false;
  check(ec, "stat", path);
  return dir;
}

uint64_t file_size(const std::filesystem::path& path) {
  std::error_code ec;
  uintmax_t size = std::filesystem::file_size(path, ec);
  check(ec, "stat", path);
  return size;
}

std::vector<std::filesystem::path> list_directory(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  check(ec, "list directory", dir);
  for (std::filesystem::directory_iterator end; it != end; it.increment(ec)) {
    check(ec, "list directory", dir);
    out.push_back(it->path());
  }
  check(ec, "list directory", dir);
  return out;
}

uint64_t directory_bytes(const std::filesystem::path& dir) {
  uint64_t total = 0;
  for (const auto& p : list_directory(dir)) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) total += std::filesystem::file_size(p, ec);
  }
  return total;
}

std::string read_file(const std::filesystem::path& path, uint64_t max_bytes) {
  posix::File file = posix::File::open_read(path);
  uint64_t size = file.size();
  TANDEM_CHECK(size <= max_bytes, ErrorCode::kDataLoss, "'{}' is {} bytes, more than the {} such a file may be",
               path.string(), size, max_bytes);
  std::string text(size, '\0');
  file.read_at(text.data(), size, 0);
  return text;
}

}  // namespace tandem::train::fs
