// MetricsCsvSink: every scalar of a run as one row of RUN_DIR/metrics.csv, in long format
// (wall_time,step,tag,value) because the tags vary by run: models, eval settings and future
// metrics add tags, and a wide header fixed by the first row would have no column for them.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "engine/core/metrics_sink.h"

namespace tandem::train {

inline constexpr std::string_view kMetricsCsvHeader = "wall_time,step,tag,value";

class MetricsCsvSink final : public MetricsSink {
 public:
  // Makes run_dir (and its parents) when missing, as TensorBoard's SummaryWriter makes its log_dir,
  // and opens run_dir/metrics.csv for appending: a resumed run adds rows under the ones it already
  // has. A new or empty file gets the header; an existing file with another first line is a
  // FailedPrecondition (it is not ours to append to). Rows reach the file at flush() and at
  // least every flush_every_s seconds while scalars come; flush() also syncs them to the disk.
  explicit MetricsCsvSink(const std::filesystem::path& run_dir, double flush_every_s = 2.0);
  ~MetricsCsvSink() override;  // flushes and closes; an error there is logged, never thrown
  MetricsCsvSink(const MetricsCsvSink&) = delete;
  MetricsCsvSink& operator=(const MetricsCsvSink&) = delete;

  void scalar(const std::string& tag, double value, int64_t step) override;
  void flush() override;
  // Rewrites the file without the rows of steps after `step` (atomically: a temporary sibling,
  // fsync, rename), so the resumed run's rows for those steps are the only ones.
  void resume_at(int64_t step) override;
  void close();  // flushes and closes, reporting any error

  const std::filesystem::path& path() const { return path_; }

 private:
  void flush_locked();
  void open_for_appending();

  std::filesystem::path path_;
  int fd_ = -1;
  std::string pending_;  // rows not yet written
  std::chrono::steady_clock::duration flush_every_;
  std::chrono::steady_clock::time_point last_flush_;
  std::mutex mutex_;
};

// One CSV row (with its newline): the tag quoted as RFC 4180 says when it holds a comma, a quote
// or a line break; numbers in the shortest form that reads back to the same double.
std::string metrics_csv_row(double wall_time, int64_t step, std::string_view tag, double value);
// The step of a row (its second field), or nullopt when the row is not one of ours (a partial row
// a kill left behind, say).
std::optional<int64_t> metrics_csv_step(std::string_view row);

}  // namespace tandem::train
