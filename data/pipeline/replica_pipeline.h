// Builds each replica's input pipeline from a PipelineConfig: resolve the files, plan the
// shards (and log the plan), then per replica: read its share, shard before shuffle and before
// decoding, shuffle, decode + augment in parallel, batch, prefetch.
#pragma once

#include <vector>

#include "data/pipeline/dataset.h"
#include "data/pipeline/pipeline_config.h"
#include "data/pipeline/sharding.h"

namespace tandem::data {

struct ReplicaPipelines {
  ShardPlan plan;
  std::vector<Dataset> datasets;  // one per replica, yielding {image[N,...], label[N]} batches
  PipelineBudget budget;          // each replica's share of the CPU and memory budgets
};

// The files the config's patterns match, sorted, without duplicates; kNotFound when none.
std::vector<std::string> resolve_files(const std::vector<std::string>& patterns);

ReplicaPipelines build_replica_pipelines(const PipelineConfig& config, int num_replicas);

// One replica's pipeline for a given shard (exposed for tests).
Dataset build_replica_dataset(const PipelineConfig& config, const ShardPlan& plan, int replica);

}  // namespace tandem::data
