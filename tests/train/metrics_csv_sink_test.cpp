// MetricsCsvSink: metrics.csv's header and rows as written, appending on resume, quoting, flush
// points, and the errors it reports.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "tests/support/files.h"
#include "tests/support/temp_dir.h"
#include "engine/train/metrics_csv_sink.h"

namespace tandem::train {
namespace {

using testing::read_file;
using testing::split_lines;
using testing::TempDir;
using ::testing::HasSubstr;

// Splits a row of our own making: only the tag may be quoted.
std::vector<std::string> fields(const std::string& row) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= row.size()) {
    std::string field;
    if (i < row.size() && row[i] == '"') {
      for (++i; i < row.size(); ++i) {
        if (row[i] == '"' && i + 1 < row.size() && row[i + 1] == '"') {
          field += '"';
          ++i;
        } else if (row[i] == '"') {
          ++i;
          break;
        } else {
          field += row[i];
        }
      }
    } else {
      size_t end = row.find(',', i);
      if (end == std::string::npos) end = row.size();
      field = row.substr(i, end - i);
      i = end;
    }
    out.push_back(field);
    ++i;  // the comma
  }
  return out;
}

TEST(MetricsCsvSinkTest, HeaderThenOneRowPerScalar) {
  TempDir dir;
  double before = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  {
    MetricsCsvSink sink(dir.path(), 3600);
    EXPECT_EQ(sink.path(), dir.path() / "metrics.csv");
    sink.scalar("train/loss", 2.302585092994046, 10);
    sink.scalar("train/lr", 0.1, 10);
    sink.scalar("eval/top1", 0.9125, 390);
    sink.scalar("eval/top5", 1e-300, 390);
  }
  std::vector<std::string> lines = split_lines(read_file(dir.path() / "metrics.csv"));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "wall_time,step,tag,value");
  struct Expected {
    int64_t step;
    const char* tag;
    double value;
  };
  std::vector<Expected> expected = {{10, "train/loss", 2.302585092994046},
                                    {10, "train/lr", 0.1},
                                    {390, "eval/top1", 0.9125},
                                    {390, "eval/top5", 1e-300}};
  for (size_t i = 0; i < expected.size(); ++i) {
    std::vector<std::string> f = fields(lines[i + 1]);
    ASSERT_EQ(f.size(), 4u) << lines[i + 1];
    EXPECT_NEAR(std::strtod(f[0].c_str(), nullptr), before, 60);
    EXPECT_EQ(std::strtoll(f[1].c_str(), nullptr, 10), expected[i].step);
    EXPECT_EQ(f[2], expected[i].tag);
    EXPECT_EQ(std::strtod(f[3].c_str(), nullptr), expected[i].value) << "the value reads back exactly";
  }
}

TEST(MetricsCsvSinkTest, TagsWithCommasOrQuotesAreQuoted) {
  EXPECT_EQ(metrics_csv_row(1.5, 3, "eval/top1", 0.5), "1.500,3,eval/top1,0.5\n");
  EXPECT_EQ(metrics_csv_row(1.5, 3, "a,b", 1), "1.500,3,\"a,b\",1\n");
  EXPECT_EQ(metrics_csv_row(1.5, 3, "say \"hi\"", 1), "1.500,3,\"say \"\"hi\"\"\",1\n");
  EXPECT_EQ(fields("1.500,3,\"say \"\"hi\"\", ok\",1"),
            (std::vector<std::string>{"1.500", "3", "say \"hi\", ok", "1"}));
}

TEST(MetricsCsvSinkTest, ResumedRunAppendsUnderOneHeader) {
  TempDir dir;
  {
    MetricsCsvSink sink(dir.path());
    sink.scalar("train/loss", 1.0, 1);
  }
  {
    MetricsCsvSink sink(dir.path());
    sink.scalar("train/loss", 0.5, 2);
  }
  std::vector<std::string> lines = split_lines(read_file(dir.path() / "metrics.csv"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "wall_time,step,tag,value");
  EXPECT_THAT(lines[1], ::testing::EndsWith(",1,train/loss,1"));
  EXPECT_THAT(lines[2], ::testing::EndsWith(",2,train/loss,0.5"));
}

TEST(MetricsCsvSinkTest, PartialLastRowOfAKilledRunIsDroppedBeforeAppending) {
  TempDir dir;
  testing::write_file(dir.path() / "metrics.csv", "wall_time,step,tag,value\n1.000,1,train/loss,1\n2.000,2,tra");
  {
    MetricsCsvSink sink(dir.path());
    sink.scalar("train/loss", 0.5, 3);
  }
  // The cut row is dropped (its value may be cut short too): its step is written again on resume.
  std::vector<std::string> lines = split_lines(read_file(dir.path() / "metrics.csv"));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "1.000,1,train/loss,1");
  EXPECT_THAT(lines[2], ::testing::EndsWith(",3,train/loss,0.5"));
}

// A run killed after its step-2 checkpoint had flushed rows of steps 3 and 4 (and half a row):
// the resumed run drops them and writes steps 3 and 4 again, so each step appears once.
TEST(MetricsCsvSinkTest, ResumeDropsTheRowsPastTheCheckpointStep) {
  TempDir dir;
  testing::write_file(dir.path() / "metrics.csv",
                      "wall_time,step,tag,value\n1.000,1,train/loss,1\n2.000,2,train/loss,0.9\n2.500,2,eval/top1,0.5\n"
                      "3.000,3,train/loss,0.8\n4.000,4,\"a,b\",0.7\n5.000,4,tra");
  {
    MetricsCsvSink sink(dir.path());
    sink.resume_at(2);
    sink.scalar("train/loss", 0.75, 3);
  }
  std::vector<std::string> lines = split_lines(read_file(dir.path() / "metrics.csv"));
  ASSERT_EQ(lines.size(), 5u) << read_file(dir.path() / "metrics.csv");
  EXPECT_EQ(lines[0], "wall_time,step,tag,value");
  EXPECT_EQ(lines[1], "1.000,1,train/loss,1");
  EXPECT_EQ(lines[3], "2.500,2,eval/top1,0.5");
  EXPECT_THAT(lines[4], ::testing::EndsWith(",3,train/loss,0.75"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "metrics.csv.tmp"));
}

TEST(MetricsCsvSinkTest, StepOfARow) {
  EXPECT_EQ(metrics_csv_step("1.000,12,train/loss,1"), 12);
  EXPECT_EQ(metrics_csv_step("1.000,12,\"a,b\",1"), 12);
  EXPECT_EQ(metrics_csv_step("2.000,1"), std::nullopt);  // cut by a kill
  EXPECT_EQ(metrics_csv_step("2.000,x1,t,1"), std::nullopt);
  EXPECT_EQ(metrics_csv_step(""), std::nullopt);
}

TEST(MetricsCsvSinkTest, RowsReachTheFileAtFlushOrWhenTheIntervalHasPassed) {
  TempDir dir;
  MetricsCsvSink slow(dir.path(), 3600);
  slow.scalar("train/loss", 1.0, 1);
  EXPECT_EQ(split_lines(read_file(slow.path())).size(), 1u) << "buffered until a flush";
  slow.flush();
  EXPECT_EQ(split_lines(read_file(slow.path())).size(), 2u);
  slow.close();

  TempDir other;
  MetricsCsvSink eager(other.path(), 0);
  eager.scalar("train/loss", 1.0, 1);
  EXPECT_EQ(split_lines(read_file(eager.path())).size(), 2u);
}

TEST(MetricsCsvSinkTest, AFileThatIsNotOursIsNotAppendedTo) {
  TempDir dir;
  testing::write_file(dir.path() / "metrics.csv", "epoch,loss\n1,0.5\n");
  try {
    MetricsCsvSink sink(dir.path());
    FAIL() << "a foreign metrics.csv must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr("metrics.csv"));
    EXPECT_THAT(e.what(), HasSubstr("--run-dir"));
  }
  EXPECT_EQ(read_file(dir.path() / "metrics.csv"), "epoch,loss\n1,0.5\n");
}

// As TensorBoard's SummaryWriter: a missing run directory is made, with its parents (the Trainer
// snippet of docs/EMBEDDING.md builds its sink before anything else touches the run directory).
TEST(MetricsCsvSinkTest, AMissingRunDirectoryIsMade) {
  TempDir dir;
  {
    MetricsCsvSink sink(dir.path() / "runs" / "a");
    sink.scalar("train/loss", 0.5, 1);
  }
  const std::vector<std::string> lines = split_lines(read_file(dir.path() / "runs" / "a" / "metrics.csv"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], kMetricsCsvHeader);
}

TEST(MetricsCsvSinkTest, OpenFailureNamesThePathAndErrno) {
  TempDir dir;
  testing::write_file(dir.path() / "file", "not a folder");
  try {
    MetricsCsvSink sink(dir.path() / "file" / "run");
    FAIL() << "a run directory under a file cannot be made";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_THAT(e.what(), HasSubstr((dir.path() / "file" / "run").string()));
    EXPECT_THAT(e.what(), HasSubstr("errno 20"));
  }
  std::filesystem::create_directories(dir.path() / "run" / "metrics.csv");  // a folder where the file goes
  try {
    MetricsCsvSink sink(dir.path() / "run");
    FAIL() << "metrics.csv cannot be opened when it is a folder";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir.path() / "run" / "metrics.csv").string()));
    EXPECT_THAT(e.what(), HasSubstr("errno 21"));
  }
}

TEST(MetricsCsvSinkTest, ClosedSinkRefusesScalars) {
  TempDir dir;
  MetricsCsvSink sink(dir.path());
  sink.close();
  sink.close();  // a second close is a no-op
  EXPECT_THROW(sink.scalar("train/loss", 1.0, 1), Error);
  EXPECT_THROW(sink.flush(), Error);
}

}  // namespace
}  // namespace tandem::train
