#include "engine/train/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tandem::train {

StepBreakdown& StepBreakdown::operator+=(const StepBreakdown& o) {
  input_wait += o.input_wait;
  copy += o.copy;
  forward += o.forward;
  backward += o.backward;
  all_reduce += o.all_reduce;
  optimizer += o.optimizer;
  return *this;
}

std::string StepBreakdown::describe(int64_t steps) const {
  double t = std::max(total(), 1e-12), per = 1000.0 / static_cast<double>(std::max<int64_t>(steps, 1));
  auto part = [&](const char* name, double v) { return fmt::format("{} {:.1f} ms ({:.1f}%)", name, v * per, 100 * v / t); };
  return fmt::format("{} | {} | {} | {} | {} | {}", part("input wait", input_wait), part("copy", copy),
                     part("forward", forward), part("backward", backward), part("all-reduce", all_reduce),
                     part("optimizer", optimizer));
}

std::string input_bound_verdict(double f) {
  double pct = 100.0 * f;
  if (pct < 5.0) return fmt::format("not input-bound ({:.1f}% of step time waiting for input)", pct);
  if (pct <= 20.0) {
    return fmt::format(
        "moderately input-bound ({:.1f}% of step time waiting for input): raise data.num_parallel_calls and "
        "data.prefetch (or autotune), or keep decoded data with data.cache: true",
        pct);
  }
  return fmt::format(
      "highly input-bound ({:.1f}% of step time waiting for input): the loaders cannot keep up. Measure them alone "
      "with `trainer bench-input`; add loader threads (data.num_parallel_calls, data.cpu_threads), use more and "
      "larger TFRecord shards, cache decoded data, or move augmentation off the critical path",
      pct);
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  size_t index = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size()))) - 1;
  return values[index];
}

}  // namespace tandem::train
