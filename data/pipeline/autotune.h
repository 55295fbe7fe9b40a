// Autotune for a parallel stage's thread count: it starts at half the CPU budget and adds a
// thread whenever the consumer spent more than kWaitShare of a window waiting for this stage,
// never beyond the budget; each change is logged with its reason.
#pragma once

#include <chrono>
#include <string>

namespace tandem::data {

class ParallelismTuner {
 public:
  static constexpr double kWaitShare = 0.05;  // TensorFlow's "input-bound" threshold
  static constexpr int kWindowElements = 32;
  static constexpr double kMinWindowSeconds = 0.05;

  // enabled=false pins the count at max (a fixed num_parallel_calls).
  ParallelismTuner(std::string stage, int max, bool enabled);

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

}  // namespace tandem::data
