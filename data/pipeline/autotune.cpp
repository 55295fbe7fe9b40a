// ParallelismTuner: hill-climbing on the consumer's waiting share (see autotune.h).
#include "data/pipeline/autotune.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>

namespace tandem::data {

namespace {

bool first_start_of(const std::string& stage) {
  static std::mutex mutex;
  static std::set<std::string> started;
  std::lock_guard lock(mutex);
  return started.insert(stage).second;
}

}  // namespace

ParallelismTuner::ParallelismTuner(std::string stage, int max, bool enabled, int start)
    : stage_(std::move(stage)), max_(max), enabled_(enabled),
      active_(enabled ? std::clamp(start > 0 ? start : max / 2, 1, std::max(1, max)) : max),
      window_start_(std::chrono::steady_clock::now()) {
  // A pass over a small dataset lasts a fraction of a second and each starts a tuner: the start is
  // logged once per stage (at info), later passes' starts only at debug; every change at info.
  if (enabled_) {
    spdlog::log(first_start_of(stage_) ? spdlog::level::info : spdlog::level::debug,
                "autotune: {} num_parallel_calls = {} to start ({}budget {} threads)", stage_, active_,
                start > 0 ? "as an earlier pass ended; " : "", max_);
  }
}

bool ParallelismTuner::record(double waited) {
  if (!enabled_ || active_ >= max_) return false;
  window_wait_ += waited;
  if (++window_count_ < kWindowElements) return false;
  auto now = std::chrono::steady_clock::now();
  double wall = std::chrono::duration<double>(now - window_start_).count();
  if (wall < kMinWindowSeconds) return false;
  double share = window_wait_ / wall;
  window_count_ = 0;
  window_wait_ = 0;
  window_start_ = now;
  if (share <= kWaitShare) return false;
  ++active_;
  spdlog::info("autotune: {} num_parallel_calls {} -> {} (the consumer waited {:.0f}% of the last {:.2f} s; budget {})",
               stage_, active_ - 1, active_, 100 * share, wall, max_);
  return true;
}

}  // namespace tandem::data

namespace tandem::data {
namespace {

// "112 B", "1.5 KiB", "256.0 MiB": budgets and element sizes span bytes to gigabytes.
std::string human_bytes(size_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (size_t{1} << 20)) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024);
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

BufferTuner::BufferTuner(std::string stage, size_t start, size_t max_bytes, bool enabled)
    : stage_(std::move(stage)), size_(std::max<size_t>(1, start)), max_bytes_(max_bytes), enabled_(enabled) {
  if (enabled_) {
    spdlog::debug("autotune: {} buffer_size = {} to start (memory budget {})", stage_, size_, human_bytes(max_bytes_));
  }
}

bool BufferTuner::record(double waited, size_t bytes, bool filled, double now) {
  if (!enabled_) return false;
  if (window_start_ < 0) window_start_ = now - waited;
  window_wait_ += waited;
  window_bytes_ += bytes;
  window_filled_ = window_filled_ || filled;
  if (++window_count_ < kWindowElements) return false;
  return close_window(now);
}

bool BufferTuner::close_window(double now) {
  double wall = now - window_start_;
  if (wall < kMinWindowSeconds) return false;
  double share = wall > 0 ? window_wait_ / wall : 0;
  size_t mean_bytes = std::max<size_t>(1, window_bytes_ / static_cast<size_t>(window_count_));
  bool filled = window_filled_;
  window_count_ = 0;
  window_wait_ = 0;
  window_bytes_ = 0;
  window_filled_ = false;
  window_start_ = now;
  if (share <= kWaitShare || !filled) return false;
  return grow(share, wall, mean_bytes);
}

bool BufferTuner::grow(double share, double wall, size_t mean_bytes) {
  const size_t cap = std::max<size_t>(1, max_bytes_ / mean_bytes);
  if (size_ >= cap) {
    if (!capped_logged_) {
      spdlog::info("autotune: {} buffer_size stays {}: the consumer waited {:.0f}% of the last {:.2f} s, but {} "
                   "elements of {} fill the memory budget of {} (raise data.memory_budget_mb)",
                   stage_, size_, 100 * share, wall, size_, human_bytes(mean_bytes), human_bytes(max_bytes_));
      capped_logged_ = true;
    }
    return false;
  }
  size_t old = size_;
  size_ = std::min(size_ * 2, cap);
  spdlog::info("autotune: {} buffer_size {} -> {} (the consumer waited {:.0f}% of the last {:.2f} s although the "
               "buffer had filled; memory budget {} = {} elements of {})",
               stage_, old, size_, 100 * share, wall, human_bytes(max_bytes_), cap, human_bytes(mean_bytes));
  return true;
}

}  // namespace tandem::data
