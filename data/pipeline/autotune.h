// Autotune: ParallelismTuner for a parallel stage's thread count (it starts at half the CPU
// budget and adds a thread whenever the consumer spent more than kWaitShare of a window waiting
// for this stage, never beyond the budget) and BufferTuner for a buffer's element count (it
// doubles when the consumer waited although the buffer had filled, never beyond the memory
// budget). Each change is logged with its reason.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::data {

// What an autotuned stage learned, kept by its dataset node so that the node's next iterator
// (the next epoch: the trainer makes one per epoch) starts where the last one got to instead
// of from the bottom again. Only grows, as the tuners do.
class TunedValue {
 public:
  int64_t get() const { return value_.load(std::memory_order_relaxed); }
  void raise(int64_t value) {
    int64_t current = get();
    while (current < value && !value_.compare_exchange_weak(current, value, std::memory_order_relaxed)) {
    }
  }

 private:
  std::atomic<int64_t> value_{0};
};

class ParallelismTuner {
 public:
  static constexpr double kWaitShare = 0.05;  // TensorFlow's "input-bound" threshold
  static constexpr int kWindowElements = 32;
  static constexpr double kMinWindowSeconds = 0.05;

  // enabled=false pins the count at max (a fixed num_parallel_calls). start > 0: begin there
  // (what an earlier iterator learned, at most max) instead of at max / 2.
  ParallelismTuner(std::string stage, int max, bool enabled, int start = 0);

  int active() const { return active_; }
  // The consumer took one element after waiting `waited` seconds; true when active() changed.
  bool record(double waited);

 private:
  std::string stage_;
  int max_;
  bool enabled_;
  int active_;
  int window_count_ = 0;
  double window_wait_ = 0;
  std::chrono::steady_clock::time_point window_start_;
};

// The element bound of an autotuned buffer (prefetch). Growing only pays when the producer can
// run ahead of the consumer but the bound stopped it, and the consumer then waited anyway (a
// burst of slow elements drained the buffer): tf.data's PrefetchAutotuner grows on the same
// full-then-empty signal. A buffer that never fills would not help if larger, so it stays.
// The cap is max_bytes / the mean element size of the window: the buffer's share of the memory
// budget (PipelineBudget::queue_bytes; data.memory_budget_mb, default half of RAM).
class BufferTuner {
 public:
  static constexpr double kWaitShare = ParallelismTuner::kWaitShare;
  static constexpr int kWindowElements = ParallelismTuner::kWindowElements;
  static constexpr double kMinWindowSeconds = ParallelismTuner::kMinWindowSeconds;

  // enabled=false pins the bound at start (a fixed buffer_size).
  BufferTuner(std::string stage, size_t start, size_t max_bytes, bool enabled);

  size_t size() const { return size_; }
  // The consumer took one element of `bytes` after waiting `waited` seconds; `filled`: the
  // buffer reached its bound since the last call; `now`: seconds on a monotonic clock (a
  // parameter so tests can feed a timeline). True when size() changed.
  bool record(double waited, size_t bytes, bool filled, double now);

 private:
  bool close_window(double now);
  bool grow(double share, double wall, size_t mean_bytes);

  std::string stage_;
  size_t size_;
  size_t max_bytes_;
  bool enabled_;
  bool capped_logged_ = false;  // the budget cap is logged once, not every window
  int window_count_ = 0;
  double window_wait_ = 0;
  size_t window_bytes_ = 0;
  bool window_filled_ = false;
  double window_start_ = -1;  // < 0: set by the first record()
};

}  // namespace tandem::data
