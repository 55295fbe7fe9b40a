// Per-stage counters of a running pipeline: busy time (summed over the stage's threads),
// elements produced, parallelism and the time spent waiting at the stage's queue, so
// `bench-input` and bench/pipeline_bench can say which stage limits the rate and which waits.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::data {

struct StageStats {
  explicit StageStats(std::string stage_name) : name(std::move(stage_name)) {}
  const std::string name;
  std::atomic<int64_t> busy_ns{0};
  std::atomic<int64_t> elements{0};
  std::atomic<int> parallelism{1};
  // Waits at this stage's queue, summed over threads: whoever pulls from the stage waited for an
  // element (consumer), the stage's threads waited for room to put one (producer), or for their
  // own input, the lock that serialises pulling from it included (input).
  std::atomic<int64_t> consumer_wait_ns{0};
  std::atomic<int64_t> producer_wait_ns{0};
  std::atomic<int64_t> input_wait_ns{0};
};

struct StageSnapshot {
  std::string name;
  double busy_seconds = 0;
  int64_t elements = 0;
  int parallelism = 1;
  double consumer_wait_seconds = 0;
  double producer_wait_seconds = 0;
  double input_wait_seconds = 0;
};

// The stages of one pipeline, keyed by the dataset node so a repeat does not count twice.
class PipelineStats {
 public:
  std::shared_ptr<StageStats> stage(const void* node, const std::string& name);
  std::vector<StageSnapshot> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<const void*, std::shared_ptr<StageStats>>> stages_;
};

// Adds the time between construction and destruction to one counter of a stage.
class StageTimer {
 public:
  explicit StageTimer(std::atomic<int64_t>* counter) : counter_(counter), start_(std::chrono::steady_clock::now()) {}
  ~StageTimer() {
    if (counter_ != nullptr) {
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_);
      counter_->fetch_add(ns.count(), std::memory_order_relaxed);
    }
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  std::atomic<int64_t>* counter_;
  std::chrono::steady_clock::time_point start_;
};

// Adds the time between construction and destruction to a stage's busy time.
class BusyTimer : public StageTimer {
 public:
  explicit BusyTimer(StageStats* stats) : StageTimer(stats != nullptr ? &stats->busy_ns : nullptr) {}
};

}  // namespace tandem::data
