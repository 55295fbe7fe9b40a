// TensorBoardSink: builds tensorflow.Event protos (third_party/tensorboard) and frames them with
// TFRecordWriter, which is exactly what TensorFlow's EventsWriter puts on disk.
#include "data/tensorboard_sink.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <climits>
#include <system_error>

#include "data/tfrecord_writer.h"
#include "engine/core/error.h"
#include "third_party/tensorboard/event.pb.h"

namespace tandem::data {
namespace {

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  // A name is only a label in the file name: an unknown host is no reason to fail a run.
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

int64_t unix_seconds_now() {
  using namespace std::chrono;
  return duration_cast<seconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::filesystem::path tensorboard_event_file_path(const std::filesystem::path& run_dir, int64_t unix_seconds) {
  std::string base = fmt::format("events.out.tfevents.{:010d}.{}", unix_seconds, host_name());
  std::filesystem::path path = run_dir / base;
  std::error_code ec;
  // TensorBoard reads every file whose name holds "tfevents", so a suffix keeps both files visible.
  for (int n = 1; std::filesystem::exists(path, ec); ++n) path = run_dir / fmt::format("{}.{}", base, n);
  return path;
}

TensorBoardSink::TensorBoardSink(const std::filesystem::path& run_dir, double flush_every_s)
    : path_(tensorboard_event_file_path(run_dir, unix_seconds_now())),
      flush_every_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(flush_every_s))),
      last_flush_(std::chrono::steady_clock::now()) {
  TANDEM_CHECK(flush_every_s >= 0, ErrorCode::kInvalidArgument, "TensorBoardSink: flush interval {} s is negative",
               flush_every_s);
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);  // when missing
  TANDEM_CHECK(
      !ec, ec == std::errc::no_space_on_device ? ErrorCode::kResourceExhausted : ErrorCode::kFailedPrecondition,
      "TensorBoardSink: cannot make the run directory '{}': {} (errno {})", run_dir.string(), ec.message(), ec.value());
  writer_ = std::make_unique<TFRecordWriter>(path_.string());
  tensorflow::Event event;
  event.set_wall_time(wall_time_now());
  event.set_file_version("brain.Event:2");
  write_event(event.SerializeAsString());
  // The version record on disk at once: TensorBoard lists the run even before the first scalar.
  writer_->flush();
}

TensorBoardSink::~TensorBoardSink() {
  try {
    close();
  } catch (const Error& e) {
    spdlog::error("closing the TensorBoard event file {}: {}", path_.string(), e.what());
  }
}

void TensorBoardSink::write_event(const std::string& serialized) {
  TANDEM_CHECK(writer_ != nullptr, ErrorCode::kFailedPrecondition, "TensorBoard event file {} is closed",
               path_.string());
  writer_->write(serialized);
}

void TensorBoardSink::scalar(const std::string& tag, double value, int64_t step) {
  tensorflow::Event event;
  event.set_wall_time(wall_time_now());
  event.set_step(step);
  tensorflow::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  std::string serialized = event.SerializeAsString();

  std::lock_guard lock(mutex_);
  write_event(serialized);
  auto now = std::chrono::steady_clock::now();
  if (now - last_flush_ >= flush_every_) {
    writer_->flush();
    last_flush_ = now;
  }
}

void TensorBoardSink::resume_at(int64_t step) {
  tensorflow::Event event;
  event.set_wall_time(wall_time_now());
  event.set_step(step + 1);
  event.mutable_session_log()->set_status(tensorflow::SessionLog::START);
  std::string serialized = event.SerializeAsString();
  std::lock_guard lock(mutex_);
  write_event(serialized);
  writer_->flush();
  last_flush_ = std::chrono::steady_clock::now();
}

void TensorBoardSink::flush() {
  std::lock_guard lock(mutex_);
  TANDEM_CHECK(writer_ != nullptr, ErrorCode::kFailedPrecondition, "TensorBoard event file {} is closed",
               path_.string());
  writer_->flush();
  last_flush_ = std::chrono::steady_clock::now();
}

void TensorBoardSink::close() {
  std::lock_guard lock(mutex_);
  if (!writer_) return;
  // Released before close() can throw, so the destructor never tries a second time.
  std::unique_ptr<TFRecordWriter> writer = std::move(writer_);
  writer->close();
}

}  // namespace tandem::data
