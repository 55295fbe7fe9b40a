// PipelineStats: the registry of stage counters shared by every iterator of one pipeline.
#include "data/pipeline/stage_stats.h"

namespace tandem::data {

std::shared_ptr<StageStats> PipelineStats::stage(const void* node, const std::string& name) {
  std::lock_guard lock(mutex_);
  for (auto& [key, stats] : stages_) {
    if (key == node) {
      return stats;
    }
  }
  stages_.emplace_back(node, std::make_shared<StageStats>(name));
  return stages_.back().second;
}

std::vector<StageSnapshot> PipelineStats::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<StageSnapshot> out;
  for (const auto& [key, stats] : stages_) {
    auto seconds = [](const std::atomic<int64_t>& ns) { return static_cast<double>(ns.load()) * 1e-9; };
    out.push_back({.name = stats->name,
                   .busy_seconds = seconds(stats->busy_ns),
                   .elements = stats->elements.load(),
                   .parallelism = stats->parallelism.load(),
                   .consumer_wait_seconds = seconds(stats->consumer_wait_ns),
                   .producer_wait_seconds = seconds(stats->producer_wait_ns),
                   .input_wait_seconds = seconds(stats->input_wait_ns)});
  }
  return out;
}

}  // namespace tandem::data
