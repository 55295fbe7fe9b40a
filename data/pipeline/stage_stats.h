// Per-stage counters of a running pipeline: busy time (summed over the stage's threads),
// elements produced and parallelism, so `bench-input` can say which stage limits the rate.
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
};

struct StageSnapshot {
  std::string name;
  double busy_seconds = 0;
  int64_t elements = 0;
  int parallelism = 1;
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

// Adds the time between construction and destruction to a stage's busy time.
class BusyTimer {
 public:
  explicit BusyTimer(StageStats* stats) : stats_(stats), start_(std::chrono::steady_clock::now()) {}
  ~BusyTimer() {
    if (stats_ != nullptr) {
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_);
      stats_->busy_ns.fetch_add(ns.count(), std::memory_order_relaxed);
    }
  }
  BusyTimer(const BusyTimer&) = delete;
  BusyTimer& operator=(const BusyTimer&) = delete;

 private:
  StageStats* stats_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tandem::data
