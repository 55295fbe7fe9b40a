// `trainer scaling`'s report: one row per replica count, and the markdown table, CSV and SVG
// chart made from those rows. Pure functions of the rows (no files, no clocks), so tests can
// check the arithmetic and the formats without training anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/train/metrics.h"

namespace tandem::tools {

struct ScalingRow {
  int replicas = 1;   // of every process
  int processes = 1;
  double inter_process_ms = 0;  // per step, in collectives across processes (RunSummary's)
  int64_t global_batch = 0, per_replica_batch = 0;
  double images_per_sec = 0;  // the task's units (images, a GPT's tokens) / wall time after warm-up (RunSummary's)
  std::string unit = "images";  // what images_per_sec counts: "images" or "tokens"
  double step_p50_ms = 0, step_p95_ms = 0;
  train::StepBreakdown breakdown;  // replica 0's, summed over the timed steps
  double efficiency = 0;           // set by fill_efficiency
};

// efficiency = throughput_N / (N x throughput_1). The baseline is the row with the fewest
// replicas; when that is not 1, its per-replica throughput stands in for throughput_1.
// Throws InvalidArgument for no rows or a baseline with no throughput.
void fill_efficiency(std::vector<ScalingRow>& rows);

// A phase's share of the breakdown's total (0 when nothing was timed).
double phase_share(const train::StepBreakdown& b, double phase_seconds);

// The table as markdown (also what stdout shows); mode is "strong" or "weak".
std::string scaling_markdown(const std::vector<ScalingRow>& rows, const std::string& mode);

// Header plus one line per row; shares are fractions (0 to 1), times milliseconds.
std::string scaling_csv(const std::vector<ScalingRow>& rows);

// Two panels: throughput against replicas with the ideal N x throughput_1 dashed, and
// efficiency with 100% dashed. Hand-written, self-contained SVG.
std::string scaling_svg(const std::vector<ScalingRow>& rows, const std::string& title);

}  // namespace tandem::tools
