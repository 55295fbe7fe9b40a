// The measurement behind `trainer bench-input`: runs every replica's input pipeline at full
// speed, each on its own consumer thread as in training, and reports rates and stage load.
#pragma once

#include <string>
#include <vector>

#include "data/pipeline/pipeline_config.h"
#include "data/pipeline/stage_stats.h"

namespace tandem::tools {

struct BenchInputArgs {
  std::string config;
  int replicas = 1;
  double seconds = 10;
  double warmup_seconds = 1;
  double step_time_ms = 0;  // 0: report the shortest step time the input can feed
  bool json = false;
};

struct ReplicaRate {
  int replica = 0;
  double images_per_second = 0;
  double batch_wait_p50_ms = 0;  // time the consumer waited for a batch
  double batch_wait_p95_ms = 0;
  int64_t batches = 0;
};

struct StageLoad {
  std::string name;
  double busy_seconds = 0;  // summed over replicas and threads
  int threads = 1;          // per replica
  double utilisation = 0;   // busy / (wall * threads * replicas)
};

struct BenchInputReport {
  std::vector<std::string> plan;  // the shard plan's log lines
  std::vector<ReplicaRate> replicas;
  std::vector<StageLoad> stages;
  double total_images_per_second = 0;
  int64_t batch_size = 0;
  double measured_seconds = 0;
  std::string limiting_stage;
  double fed_step_time_ms = 0;  // the shortest step every replica can be fed at
};

BenchInputReport run_bench_input(const data::PipelineConfig& config, const BenchInputArgs& args);
std::string render_bench_input_text(const BenchInputReport& report, const BenchInputArgs& args);
std::string render_bench_input_json(const BenchInputReport& report, const BenchInputArgs& args);

}  // namespace tandem::tools
