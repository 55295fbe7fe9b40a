// TensorBoardSink: scalars as a TensorBoard event file (a TFRecord of tensorflow.Event protos,
// uncompressed), RUN_DIR/events.out.tfevents.<unix seconds>.<hostname>, readable while it grows.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "engine/core/metrics_sink.h"

namespace tandem::data {
class TFRecordWriter;
}

namespace tandem::data {

class TensorBoardSink final : public MetricsSink {
 public:
  // Creates the event file in run_dir (made, with its parents, when missing, as TensorBoard's
  // SummaryWriter makes its log_dir) and writes its first record, the file_version event
  // "brain.Event:2". Records reach the file at flush() and, when scalars keep coming, at least
  // every flush_every_s seconds, so a running TensorBoard shows progress.
  explicit TensorBoardSink(const std::filesystem::path& run_dir, double flush_every_s = 2.0);
  ~TensorBoardSink() override;  // flushes and closes; an error there is logged, never thrown
  TensorBoardSink(const TensorBoardSink&) = delete;
  TensorBoardSink& operator=(const TensorBoardSink&) = delete;

  // One Event per call: wall_time, step and summary.value {tag, simple_value}. TensorBoard stores
  // scalars as float32, so the value is rounded to float here.
  void scalar(const std::string& tag, double value, int64_t step) override;
  void flush() override;
  // Writes a SessionLog START event at step + 1 and flushes: TensorBoard then drops what it holds
  // for later steps (a stopped run's rows past its checkpoint), which the resumed run writes again.
  void resume_at(int64_t step) override;
  // Flushes and closes the file, reporting any error; later calls throw FailedPrecondition.
  void close();

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_event(const std::string& serialized);

  std::filesystem::path path_;
  std::unique_ptr<TFRecordWriter> writer_;
  std::chrono::steady_clock::duration flush_every_;
  std::chrono::steady_clock::time_point last_flush_;
  std::mutex mutex_;  // sinks are called from replica 0's thread and flushed from the caller's
};

// events.out.tfevents.<unix seconds, 10 digits>.<hostname>, TensorFlow's EventsWriter name; with a
// ".<n>" suffix when a file of that name exists already (two sinks started in the same second).
std::filesystem::path tensorboard_event_file_path(const std::filesystem::path& run_dir, int64_t unix_seconds);

}  // namespace tandem::data
