// Builds each replica's input pipeline from a PipelineConfig: resolve the files, plan the
// shards (and log the plan), then per replica: read its share, shard before shuffle and before
// decoding, shuffle, decode + augment (or parse token windows) in parallel, batch, prefetch.
#pragma once

#include <vector>

#include "data/pipeline/dataset.h"
#include "data/pipeline/pipeline_config.h"
#include "data/pipeline/sharding.h"

namespace tandem::data {

struct ReplicaPipelines {
  ShardPlan plan;                 // over every replica of every process
  // One per replica of this process, yielding {image[N,...], label[N]} batches, or {tokens[N, length]}
  // when the config's records are token windows (data.tokens).
  std::vector<Dataset> datasets;
  PipelineBudget budget;          // each of this process's replicas' share of its CPU and memory budgets
};

// The files the config's patterns match, sorted, without duplicates; kNotFound when none.
std::vector<std::string> resolve_files(const std::vector<std::string>& patterns);

// The shards of num_replicas replicas (every process's), and the pipelines of this process's
// local_replicas of them, from first_replica on (the global replica index). log_plan: the shard
// plan to the log (process 0 only).
ReplicaPipelines build_replica_pipelines(const PipelineConfig& config, int num_replicas, int first_replica = 0,
                                         int local_replicas = -1, bool log_plan = true);

// One replica's pipeline for a given shard (exposed for tests).
Dataset build_replica_dataset(const PipelineConfig& config, const ShardPlan& plan, int replica);

}  // namespace tandem::data
