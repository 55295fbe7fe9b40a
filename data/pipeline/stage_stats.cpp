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
    out.push_back({stats->name, static_cast<double>(stats->busy_ns.load()) * 1e-9, stats->elements.load(),
                   stats->parallelism.load()});
  }
  return out;
}

}  // namespace tandem::data
