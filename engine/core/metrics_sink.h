// Where scalar metrics go: metrics.csv, TensorBoard event files, or a program's own writer.
// In core so that writers in data/ (TensorBoard's TFRecord event files) and engine/train (CSV)
// implement one interface, and the trainer's MetricsWriter callback feeds any of them.
#pragma once

#include <cstdint>
#include <string>

namespace tandem {

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void scalar(const std::string& tag, double value, int64_t step) = 0;
  virtual void flush() {}
  // A run starts after `step` (its resumed checkpoint's, or 0): what a stopped or killed run wrote
  // for later steps goes (this run writes those steps again), so every step is recorded once.
  virtual void resume_at(int64_t /*step*/) {}
};

}  // namespace tandem
