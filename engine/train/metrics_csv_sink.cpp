// MetricsCsvSink: a plain append-only file written with checked POSIX calls; rows are batched in
// memory and written at flush points, so a step costs no system call.
#include "engine/train/metrics_csv_sink.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cerrno>
#include <optional>
#include <system_error>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/output_file.h"
#include "engine/train/checkpoint/fs.h"
#include "engine/train/checkpoint/posix.h"

namespace tandem::train {
namespace {

using train::posix::throw_errno;


void write_all(int fd, std::string_view bytes, const std::filesystem::path& path) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("write", path, errno);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

// The first line of the file, at most the header's length plus one byte; "" when empty.
std::string first_line(int fd, const std::filesystem::path& path) {
  std::string line(kMetricsCsvHeader.size() + 1, '\0');
  ssize_t n;
  do {
    n = ::pread(fd, line.data(), line.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) throw_errno("read", path, errno);
  line.resize(static_cast<size_t>(n));
  return line.substr(0, line.find('\n'));
}

bool ends_with_newline(int fd, const std::filesystem::path& path) {
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0) throw_errno("lseek", path, errno);
  char last = '\n';
  ssize_t n;
  do {
    n = size > 0 ? ::pread(fd, &last, 1, size - 1) : 0;
  } while (n < 0 && errno == EINTR);
  if (n < 0) throw_errno("read", path, errno);
  return last == '\n';
}

// Every byte of the file.
std::string read_all(int fd, const std::filesystem::path& path) {
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0) throw_errno("lseek", path, errno);
  std::string text(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("read", path, errno);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

// Cuts the file after its last newline (the header's, at least: the caller checked it).
void drop_partial_last_row(int fd, const std::filesystem::path& path) {
  const std::string text = read_all(fd, path);
  const size_t newline = text.rfind('\n');
  const off_t keep = newline == std::string::npos ? 0 : static_cast<off_t>(newline + 1);
  if (::ftruncate(fd, keep) != 0) throw_errno("ftruncate", path, errno);
  if (keep == 0) write_all(fd, fmt::format("{}\n", kMetricsCsvHeader), path);
}

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

// Every line after the header (without newlines; an empty last piece left out).
std::vector<std::string> rows_after_header(int fd, const std::filesystem::path& path) {
  const std::string text = read_all(fd, path);
  std::vector<std::string> rows;
  size_t start = text.find('\n');
  while (start != std::string::npos && start + 1 < text.size()) {
    size_t end = text.find('\n', start + 1);
    rows.push_back(text.substr(start + 1, end == std::string::npos ? std::string::npos : end - start - 1));
    start = end;
  }
  return rows;
}

// Whether a row ends in a whole number (a kill during a write may cut its value short or leave
// only its first fields).
bool has_a_value(const std::string& row) {
  const size_t comma = row.rfind(',');
  if (comma == std::string::npos || comma + 1 >= row.size() || row.back() == '"') return false;
  const char* begin = row.c_str() + comma + 1;
  char* end = nullptr;
  std::strtod(begin, &end);
  return end == row.c_str() + row.size();
}

}  // namespace

std::optional<int64_t> metrics_csv_step(std::string_view row) {
  const size_t first = row.find(',');
  if (first == std::string_view::npos) return std::nullopt;
  const size_t second = row.find(',', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  int64_t step = 0;
  const char* begin = row.data() + first + 1;
  const char* end = row.data() + second;
  auto [ptr, ec] = std::from_chars(begin, end, step);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return step;
}

std::string metrics_csv_row(double wall_time, int64_t step, std::string_view tag, double value) {
  // Milliseconds are plenty for a wall clock; fmt's "{}" is the shortest exact form of a double.
  return fmt::format("{:.3f},{},{},{}\n", wall_time, step, csv_field(tag), value);
}

MetricsCsvSink::MetricsCsvSink(const std::filesystem::path& run_dir, double flush_every_s)
    : path_(run_dir / "metrics.csv"),
      flush_every_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(flush_every_s))),
      last_flush_(std::chrono::steady_clock::now()) {
  TANDEM_CHECK(flush_every_s >= 0, ErrorCode::kInvalidArgument, "MetricsCsvSink: flush interval {} s is negative",
               flush_every_s);
  fs::create_directories(run_dir);  // when missing
  open_for_appending();
  std::string line = first_line(fd_, path_);
  if (line.empty()) {
    write_all(fd_, fmt::format("{}\n", kMetricsCsvHeader), path_);
  } else if (line == kMetricsCsvHeader) {
    // A run killed mid-write leaves a partial last row (no newline): drop it, since its value may be
    // cut short; the step it belongs to comes after the checkpoint and is written again.
    if (!ends_with_newline(fd_, path_)) drop_partial_last_row(fd_, path_);
  } else if (line != kMetricsCsvHeader) {
    ::close(fd_);
    fd_ = -1;
    throw_error(ErrorCode::kFailedPrecondition,
                "'{}' exists and does not start with the header '{}' (it starts '{}'); give the run another "
                "directory (--run-dir) or move the file away",
                path_.string(), kMetricsCsvHeader, line.substr(0, 80));
  }
}

void MetricsCsvSink::open_for_appending() {
  do {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) throw_errno("open for appending", path_, errno);
}

MetricsCsvSink::~MetricsCsvSink() {
  try {
    close();
  } catch (const Error& e) {
    spdlog::error("closing {}: {}", path_.string(), e.what());
  }
}

void MetricsCsvSink::scalar(const std::string& tag, double value, int64_t step) {
  double wall_time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard lock(mutex_);
  TANDEM_CHECK(fd_ >= 0, ErrorCode::kFailedPrecondition, "'{}' is closed", path_.string());
  pending_ += metrics_csv_row(wall_time, step, tag, value);
  if (std::chrono::steady_clock::now() - last_flush_ >= flush_every_) flush_locked();
}

void MetricsCsvSink::flush() {
  std::lock_guard lock(mutex_);
  TANDEM_CHECK(fd_ >= 0, ErrorCode::kFailedPrecondition, "'{}' is closed", path_.string());
  flush_locked();
  // Synced too: flush() comes before each checkpoint, which is synced, and the rows must not be
  // the part of the pair a power loss takes away.
  int rc;
  do {
    rc = ::fdatasync(fd_);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) throw_errno("fdatasync", path_, errno);
}

void MetricsCsvSink::flush_locked() {
  // Cleared before the write: a failed row is reported once, not written again at every flush.
  std::string rows = std::move(pending_);
  pending_.clear();
  last_flush_ = std::chrono::steady_clock::now();
  write_all(fd_, rows, path_);
}

void MetricsCsvSink::resume_at(int64_t step) {
  std::lock_guard lock(mutex_);
  TANDEM_CHECK(fd_ >= 0, ErrorCode::kFailedPrecondition, "'{}' is closed", path_.string());
  flush_locked();
  std::string kept, dropped_steps;
  int64_t dropped = 0;
  for (const std::string& row : rows_after_header(fd_, path_)) {
    std::optional<int64_t> row_step = metrics_csv_step(row);
    if (row_step && *row_step <= step && has_a_value(row)) {
      kept += row + "\n";
    } else {
      ++dropped;
    }
  }
  if (dropped == 0) return;
  write_file_atomically(path_, fmt::format("{}\n{}", kMetricsCsvHeader, kept), "metrics.csv");
  ::close(fd_);
  fd_ = -1;
  open_for_appending();
  // A warning: on a fresh start (step 0) in a reused run directory these may be an earlier run's rows.
  spdlog::warn("{}: {} row(s) past step {} removed: this run starts after step {} and writes those steps again",
               path_.string(), dropped, step, step);
}

void MetricsCsvSink::close() {
  std::lock_guard lock(mutex_);
  if (fd_ < 0) return;
  int fd = fd_;
  try {
    flush_locked();
  } catch (...) {
    fd_ = -1;
    ::close(fd);
    throw;
  }
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) throw_errno("close", path_, errno);
}

}  // namespace tandem::train
