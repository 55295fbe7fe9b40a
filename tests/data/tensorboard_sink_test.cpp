// TensorBoardSink: the event file read back with our TFRecordReader (CRCs checked) and parsed with
// the generated tensorflow.Event; the wire bytes checked against TensorFlow's field numbers by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "data/tfrecord_reader.h"
#include "engine/core/error.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "third_party/tensorboard/event.pb.h"
#include "data/tensorboard_sink.h"

namespace tandem::data {
namespace {

using testing::TempDir;

std::vector<tensorflow::Event> read_events(const std::filesystem::path& path) {
  data::TFRecordReader reader(path.string());  // verify_crc and on_corrupt=fail by default
  std::vector<tensorflow::Event> events;
  std::string_view record;
  while (reader.next(&record)) {
    tensorflow::Event event;
    EXPECT_TRUE(event.ParseFromArray(record.data(), static_cast<int>(record.size())));
    events.push_back(event);
  }
  return events;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(TensorBoardSinkTest, FileIsNamedAsTensorFlowNamesIt) {
  TempDir dir;
  TensorBoardSink sink(dir.path());
  EXPECT_EQ(sink.path().parent_path(), dir.path());
  EXPECT_TRUE(std::regex_match(sink.path().filename().string(), std::regex(R"(events\.out\.tfevents\.\d{10}\..+)")))
      << sink.path();
  EXPECT_TRUE(std::filesystem::exists(sink.path()));
}

TEST(TensorBoardSinkTest, FirstRecordIsFileVersionThenOneEventPerScalar) {
  TempDir dir;
  double before = now_seconds();
  std::filesystem::path path;
  {
    TensorBoardSink sink(dir.path(), 3600);
    path = sink.path();
    sink.scalar("train/loss", 2.25, 10);
    sink.scalar("train/lr", 0.1, 10);
    sink.scalar("eval/top1", 0.9125, 390);
    sink.close();
  }
  double after = now_seconds();
  std::vector<tensorflow::Event> events = read_events(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].what_case(), tensorflow::Event::kFileVersion);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[0].step(), 0);
  EXPECT_GE(events[0].wall_time(), before - 1);
  EXPECT_LE(events[0].wall_time(), after + 1);

  struct Expected {
    const char* tag;
    float value;
    int64_t step;
  };
  std::vector<Expected> expected = {{"train/loss", 2.25f, 10}, {"train/lr", 0.1f, 10}, {"eval/top1", 0.9125f, 390}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const tensorflow::Event& e = events[i + 1];
    ASSERT_EQ(e.what_case(), tensorflow::Event::kSummary) << i;
    ASSERT_EQ(e.summary().value_size(), 1);
    const tensorflow::Summary::Value& v = e.summary().value(0);
    EXPECT_EQ(v.tag(), expected[i].tag);
    EXPECT_EQ(v.value_case(), tensorflow::Summary::Value::kSimpleValue);
    EXPECT_EQ(v.simple_value(), expected[i].value);  // exactly the float the double rounds to
    EXPECT_EQ(e.step(), expected[i].step);
    EXPECT_GE(e.wall_time(), events[i].wall_time());
    EXPECT_LE(e.wall_time(), after + 1);
  }
}

TEST(TensorBoardSinkTest, FlushMakesScalarsVisibleWhileTheFileIsOpen) {
  TempDir dir;
  TensorBoardSink sink(dir.path(), 3600);  // no time-based flush during the test
  EXPECT_EQ(read_events(sink.path()).size(), 1u) << "the version record is on disk at once";
  sink.scalar("train/loss", 1.0, 1);
  sink.scalar("train/loss", 0.5, 2);
  EXPECT_EQ(read_events(sink.path()).size(), 1u) << "buffered until a flush";
  sink.flush();
  std::vector<tensorflow::Event> events = read_events(sink.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].step(), 2);
  sink.scalar("train/loss", 0.25, 3);  // still writable after a flush
  sink.flush();
  EXPECT_EQ(read_events(sink.path()).size(), 4u);
}

TEST(TensorBoardSinkTest, ScalarsReachTheFileOnceTheFlushIntervalHasPassed) {
  TempDir dir;
  TensorBoardSink sink(dir.path(), 0);  // every interval has passed by the next scalar
  sink.scalar("train/loss", 1.0, 1);
  EXPECT_EQ(read_events(sink.path()).size(), 2u);
  sink.scalar("train/loss", 0.5, 2);
  EXPECT_EQ(read_events(sink.path()).size(), 3u);
}

TEST(TensorBoardSinkTest, RecordsCarryValidCrcsThatTheReaderChecks) {
  TempDir dir;
  std::filesystem::path path;
  {
    TensorBoardSink sink(dir.path());
    path = sink.path();
    sink.scalar("train/loss", 1.0, 1);
  }
  EXPECT_EQ(read_events(path).size(), 2u);  // every CRC valid
  std::string bytes = testing::read_file(path);
  bytes[bytes.size() - 6] ^= 0x20;  // inside the last record's data
  testing::write_file(path, bytes);
  data::TFRecordReader reader(path.string());
  std::string_view record;
  ASSERT_TRUE(reader.next(&record));
  try {
    reader.next(&record);
    FAIL() << "a flipped bit must fail the data CRC";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  }
}

// Independent of our .proto: the bytes a scalar event must have with TensorFlow's field numbers
// (Event.step = 2 varint, Event.summary = 5, Summary.value = 1, Value.tag = 1, Value.simple_value
// = 2 fixed32; Event.file_version = 3, Event.wall_time = 1 fixed64).
TEST(TensorBoardSinkTest, WireFormatUsesTensorFlowsFieldNumbers) {
  tensorflow::Event scalar;
  scalar.set_step(7);
  tensorflow::Summary::Value* v = scalar.mutable_summary()->add_value();
  v->set_tag("a");
  v->set_simple_value(1.0f);
  const std::string expected_scalar("\x10\x07\x2a\x0a\x0a\x08\x0a\x01" "a" "\x15\x00\x00\x80\x3f", 14);
  EXPECT_EQ(scalar.SerializeAsString(), expected_scalar);

  tensorflow::Event version;
  version.set_wall_time(1.0);
  version.set_file_version("brain.Event:2");
  // One literal (11 framing bytes, then the string): GCC 12's -Warray-bounds misfires on
  // std::string + const char* here once the test is compiled with the precompiled gtest header.
  const std::string expected_version("\x09\x00\x00\x00\x00\x00\x00\xf0\x3f\x1a\x0d"
                                     "brain.Event:2",
                                     11 + 13);
  EXPECT_EQ(version.SerializeAsString(), expected_version);
}

// TensorBoard drops what it holds for steps >= a SessionLog START's step: a resumed run marks
// the step after its checkpoint so a killed run's later points are not drawn twice.
TEST(TensorBoardSinkTest, ResumeWritesASessionStartAfterTheCheckpointStep) {
  TempDir dir;
  std::filesystem::path path;
  {
    TensorBoardSink sink(dir.path());
    path = sink.path();
    sink.resume_at(40);
    sink.scalar("train/loss", 0.5, 41);
  }
  std::vector<tensorflow::Event> events = read_events(path);
  ASSERT_EQ(events.size(), 3u);
  ASSERT_TRUE(events[1].has_session_log());
  EXPECT_EQ(events[1].session_log().status(), tensorflow::SessionLog::START);
  EXPECT_EQ(events[1].step(), 41);
  EXPECT_GT(events[1].wall_time(), 0.0);
  // TensorFlow's field numbers: session_log = 7 (length-delimited), status = 1 (varint START = 1).
  tensorflow::Event start;
  start.set_step(41);
  start.mutable_session_log()->set_status(tensorflow::SessionLog::START);
  EXPECT_EQ(start.SerializeAsString(), std::string("\x10\x29\x3a\x02\x08\x01", 6));
}

TEST(TensorBoardSinkTest, TwoSinksStartedInTheSameSecondWriteTwoFiles) {
  TempDir dir;
  TensorBoardSink a(dir.path());
  TensorBoardSink b(dir.path());
  EXPECT_NE(a.path(), b.path());
  a.close();
  b.close();
  EXPECT_EQ(read_events(a.path()).size(), 1u);
  EXPECT_EQ(read_events(b.path()).size(), 1u);
}

// As TensorBoard's SummaryWriter: a missing run directory is made, with its parents.
TEST(TensorBoardSinkTest, AMissingRunDirectoryIsMade) {
  TempDir dir;
  TensorBoardSink sink(dir.path() / "runs" / "a");
  sink.close();
  EXPECT_EQ(sink.path().parent_path(), dir.path() / "runs" / "a");
  EXPECT_EQ(read_events(sink.path()).size(), 1u);
}

TEST(TensorBoardSinkTest, ErrorsAreTandemErrors) {
  TempDir dir;
  testing::write_file(dir.path() / "file", "not a folder");
  try {
    TensorBoardSink blocked(dir.path() / "file" / "run");
    FAIL() << "a run directory under a file cannot be made";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), ::testing::HasSubstr((dir.path() / "file" / "run").string()));
  }
  TensorBoardSink sink(dir.path());
  sink.close();
  try {
    sink.scalar("train/loss", 1.0, 1);
    FAIL() << "a closed sink must refuse scalars";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), ::testing::HasSubstr(sink.path().string()));
  }
}

}  // namespace
}  // namespace tandem::data
