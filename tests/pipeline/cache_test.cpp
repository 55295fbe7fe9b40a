// cache(filename): written on the first complete pass, read by later passes and by a fresh
// pipeline (as a later run would); an unfinished pass leaves no file; a truncated file is
// rebuilt with a warning; a damaged element is an error naming the file and the offset.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/pipeline/dataset.h"
#include "data/pipeline/pipeline_config.h"
#include "data/pipeline/replica_pipeline.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;
using testing::records_of;
using testing::ScratchDir;

// Elements with text, a file name and tensors of three dtypes (one channels-last), counting
// how often the upstream map runs.
Dataset counted_source(std::shared_ptr<std::atomic<int>> calls, int64_t n = 20) {
  return Dataset::range(0, n).map([calls](Element e) {
    ++*calls;
    e.text = "payload-" + std::to_string(e.record);
    e.file = "/data/f.tfrecord";
    Tensor image = Tensor::empty(Shape{1, 3, 2, 2}, DType::kU8, Device::cpu(), MemoryFormat::kChannelsLast);
    for (int i = 0; i < 12; ++i) image.data<uint8_t>()[i] = static_cast<uint8_t>(e.record * 12 + i);
    e.tensors = {image, scalar_i64(e.record * 7), Tensor::from_vector({0.5f, float(e.record)}, Shape{2})};
    return e;
  });
}

std::vector<Element> drain(const Dataset& ds, int64_t epoch = 0) {
  DatasetIterator it = ds.make_iterator(epoch);
  std::vector<Element> out;
  Element e;
  while (it.next(&e)) out.push_back(e);
  return out;
}

// Files in dir other than `keep`: leftovers of an unfinished write would show here.
std::vector<std::string> others(const ScratchDir& dir, const std::string& keep) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.dir())) {
    if (entry.path().string() != keep) names.push_back(entry.path().filename().string());
  }
  return names;
}

int count_named(const ScratchDir& dir, const std::string& prefix) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir.dir())) n += entry.path().filename().string().starts_with(prefix);
  return n;
}

std::string log_of(const std::function<void()>& fn) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(32);
  spdlog::default_logger()->sinks().push_back(sink);
  try {
    fn();
  } catch (...) {
    spdlog::default_logger()->sinks().pop_back();
    throw;
  }
  spdlog::default_logger()->sinks().pop_back();
  std::string log;
  for (const auto& line : sink->last_formatted()) log += line;
  return log;
}

TEST(PipelineDataset, CacheFileIsWrittenOnceThenReadByLaterPassesAndRuns) {
  ScratchDir dir;
  const std::string path = dir.path("train.cache");
  auto calls = std::make_shared<std::atomic<int>>(0);
  EXPECT_EQ(records_of(counted_source(calls).cache(path).repeat(3)).size(), 60u);
  EXPECT_EQ(calls->load(), 20);
  ASSERT_TRUE(fs::exists(path));
  EXPECT_TRUE(others(dir, path).empty());

  // A new pipeline, as a later run builds it: everything comes from the file, bit for bit.
  auto later_calls = std::make_shared<std::atomic<int>>(0);
  std::vector<Element> replay = drain(counted_source(later_calls).cache(path), 5);
  std::vector<Element> fresh = drain(counted_source(calls), 5);
  EXPECT_EQ(later_calls->load(), 0);
  ASSERT_EQ(replay.size(), fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) {
    EXPECT_EQ(replay[i].record, fresh[i].record);
    EXPECT_EQ(replay[i].text, fresh[i].text);
    EXPECT_EQ(replay[i].file, fresh[i].file);
    EXPECT_EQ(replay[i].epoch, 5);  // the replaying pass's epoch, so augmentation varies per epoch
    ASSERT_EQ(replay[i].tensors.size(), 3u);
    for (size_t t = 0; t < 3; ++t) {
      const Tensor& a = replay[i].tensors[t];
      const Tensor& b = fresh[i].tensors[t];
      EXPECT_EQ(a.describe(), b.describe());
      EXPECT_EQ(a.format(), b.format());
      ASSERT_EQ(a.nbytes(), b.nbytes());
      EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << "element " << i << " tensor " << t;
    }
  }
}

TEST(PipelineDataset, CacheFileUnfinishedPassLeavesNoFile) {
  ScratchDir dir;
  const std::string path = dir.path("train.cache");
  auto calls = std::make_shared<std::atomic<int>>(0);
  {
    DatasetIterator it = counted_source(calls).cache(path).make_iterator();
    Element e;
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(it.next(&e));
  }  // destroyed mid-epoch
  EXPECT_EQ(records_of(counted_source(calls).cache(path).take(7)).size(), 7u);
  auto failing = Dataset::range(0, 10).map([](Element e) {
    TANDEM_CHECK(e.record != 6, ErrorCode::kDataLoss, "record {} is bad", e.record);
    return e;
  });
  EXPECT_THROW(records_of(failing.cache(path)), Error);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(others(dir, path).empty()) << others(dir, path).front();
  // The next complete pass writes it.
  EXPECT_EQ(records_of(counted_source(calls).cache(path)).size(), 20u);
  EXPECT_TRUE(fs::exists(path));
}

// After an error a stage may go on past the failed element (a plain map does) or end; either
// way the pass lacks an element and must not complete a cache.
TEST(PipelineDataset, CacheAfterAnErrorCachesNothing) {
  ScratchDir dir;
  const std::string path = dir.path("train.cache");
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto failing = Dataset::range(0, 10).map([calls](Element e) {
    ++*calls;
    TANDEM_CHECK(e.record != 6, ErrorCode::kDataLoss, "record {} is bad", e.record);
    return e;
  });
  for (const Dataset& ds : {failing.cache(path), failing.cache()}) {
    DatasetIterator it = ds.make_iterator();
    Element e;
    int delivered = 0;
    EXPECT_THROW(while (it.next(&e)) ++delivered, Error);
    EXPECT_EQ(delivered, 6);
    EXPECT_FALSE(it.next(&e));  // ends after the error, does not go on past it
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(others(dir, path).empty());
  const int before = calls->load();
  Dataset memory = failing.cache();
  EXPECT_THROW(records_of(memory), Error);
  EXPECT_THROW(records_of(memory), Error);  // read from the input again, not from a partial cache
  EXPECT_EQ(calls->load(), before + 14);
}

TEST(PipelineDataset, CacheFileTruncatedOrForeignIsRebuiltWithAWarning) {
  ScratchDir dir;
  const std::string path = dir.path("train.cache");
  auto calls = std::make_shared<std::atomic<int>>(0);
  records_of(counted_source(calls).cache(path));
  fs::resize_file(path, fs::file_size(path) - 10);
  std::string log = log_of([&] { EXPECT_EQ(records_of(counted_source(calls).cache(path)).size(), 20u); });
  EXPECT_EQ(calls->load(), 40);  // read from the input again
  EXPECT_NE(log.find(path), std::string::npos) << log;
  EXPECT_NE(log.find("truncated"), std::string::npos) << log;
  records_of(counted_source(calls).cache(path));
  EXPECT_EQ(calls->load(), 40);  // the rebuilt file is used

  std::ofstream(path, std::ios::trunc) << "not a cache file at all, but long enough for a header\n";
  log = log_of([&] { records_of(counted_source(calls).cache(path)); });
  EXPECT_NE(log.find("not a Tandem cache file"), std::string::npos) << log;
  EXPECT_EQ(calls->load(), 60);
}

TEST(PipelineDataset, CacheFileDamagedElementNamesFileAndOffset) {
  ScratchDir dir;
  const std::string path = dir.path("train.cache");
  auto calls = std::make_shared<std::atomic<int>>(0);
  records_of(counted_source(calls).cache(path));
  // Elements 0-9 have one size, 10-19 one byte more (a two-digit text); damage a byte inside
  // element 3's payload.
  const uint64_t header = 40;
  const uint64_t frame = (fs::file_size(path) - header - 10) / 20;
  const uint64_t offset = header + 3 * frame;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset + 12 + 20));
    f.put('\x7f');
  }
  DatasetIterator it = counted_source(calls).cache(path).make_iterator();
  Element e;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(it.next(&e));  // elements before the damage arrive
  try {
    it.next(&e);
    FAIL() << "a damaged element was delivered";
  } catch (const Error& err) {
    std::string message = err.what();
    EXPECT_EQ(err.code(), ErrorCode::kDataLoss);
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("element 3 at offset " + std::to_string(offset)), std::string::npos) << message;
    EXPECT_NE(message.find("delete the file"), std::string::npos) << message;
  }
}

TEST(PipelineDataset, CacheFileInAMissingFolderSaysWhatToDo) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  try {
    records_of(counted_source(calls).cache("/nonexistent-folder/x.cache"));
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("/nonexistent-folder/x.cache"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("folder exists"), std::string::npos) << err.what();
  }
}

TEST(PipelineDataset, ReplicaPipelineCachesToOneFilePerReplica) {
  ScratchDir dir;
  auto files = testing::write_labelled_files(dir.path("d"), {6, 6});
  PipelineConfig config = parse_pipeline_config("data:\n  files: " + dir.path("d-*.tfrecord") +
                                                "\n  cache_file: " + dir.path("c") +
                                                "\n  shuffle_buffer: 0\n  batch_size: 2\n"
                                                "  image: {format: raw, raw_shape: [2, 2, 1], height: 0, width: 0,"
                                                " augment: {random_resized_crop: false, horizontal_flip: false}}\n");
  EXPECT_EQ(config.cache_file, dir.path("c"));
  ReplicaPipelines pipelines = build_replica_pipelines(config, 2);
  std::vector<int64_t> first = testing::labels_of(pipelines.datasets[1]);
  EXPECT_EQ(first.size(), 6u);
  EXPECT_EQ(count_named(dir, "c.replica-1-of-2."), 1);
  EXPECT_EQ(count_named(dir, "c.replica-0-of-2."), 0);  // replica 0 has not run a pass
  // With the TFRecords gone, only the cache file can deliver the second epoch.
  for (const std::string& f : files) fs::remove(f);
  EXPECT_EQ(testing::labels_of(pipelines.datasets[1], 1), first);
}

}  // namespace
}  // namespace tandem::data
