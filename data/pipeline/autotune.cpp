// ParallelismTuner: hill-climbing on the consumer's waiting share (see autotune.h).
#include "data/pipeline/autotune.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace tandem::data {

ParallelismTuner::ParallelismTuner(std::string stage, int max, bool enabled)
    : stage_(std::move(stage)), max_(max), enabled_(enabled), active_(enabled ? std::max(1, max / 2) : max),
      window_start_(std::chrono::steady_clock::now()) {
  if (enabled_) {
    spdlog::info("autotune: {} num_parallel_calls = {} to start (budget {} threads)", stage_, active_, max_);
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
