// cache(filename): written on the first complete pass, read by later passes and by a fresh
// pipeline (as a later run would); an unfinished pass leaves no file; a truncated file is
// rebuilt with a warning; a damaged element is an error naming the file and the offset.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "data/crc32c.h"
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

// An element the file cannot hold (an undefined tensor) ends the pass like an input error: the
// pass must not go on and commit a file that lacks it.
TEST(PipelineDataset, CacheFileWriteErrorEndsThePassAndLeavesNoFile) {
  ScratchDir dir;
  const std::string path = dir.path("train.cache");
  auto unstorable = Dataset::range(0, 10).map([](Element e) {
    if (e.record == 4) e.tensors.push_back(Tensor{});
    return e;
  });
  DatasetIterator it = unstorable.cache(path).make_iterator();
  Element e;
  int delivered = 0;
  try {
    while (it.next(&e)) ++delivered;
    FAIL() << "an element with an undefined tensor was cached";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(err.what()).find("undefined"), std::string::npos) << err.what();
  }
  EXPECT_EQ(delivered, 4);
  EXPECT_FALSE(it.next(&e));  // ends after the error, does not go on past it
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(others(dir, path).empty());
}

// Completing the file fails (the name is taken by a folder): the error says so, and the next
// call ends the pass instead of failing again with "committed twice".
TEST(PipelineDataset, CacheFileCommitErrorIsReportedOnce) {
  ScratchDir dir;
  const std::string path = dir.path("train.cache");
  fs::create_directories(path + "/occupied");
  auto calls = std::make_shared<std::atomic<int>>(0);
  DatasetIterator it = counted_source(calls, 3).cache(path).make_iterator();
  Element e;
  try {
    while (it.next(&e)) {
    }
    FAIL() << "the rename onto a folder succeeded";
  } catch (const Error& err) {
    // A folder at the path is refused before the rename, as every writer refuses what is not a file.
    EXPECT_EQ(err.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(err.what()).find("completing it"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("is a directory"), std::string::npos) << err.what();
  }
  EXPECT_NO_THROW(EXPECT_FALSE(it.next(&e)));
  EXPECT_EQ(others(dir, path).size(), 0u);  // the temporary file is gone
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

template <typename T>
void put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// A cache file of one element whose frame says `length` and whose payload is `payload`, every
// CRC correct: only the bounds checks can catch what it makes up.
void write_crafted(const std::string& path, uint64_t length, const std::string& payload) {
  std::string body;
  put(&body, length);
  put(&body, crc32c(body));
  body += payload;
  put(&body, crc32c(payload));
  std::string header("TNDMCACH", 8);
  put(&header, uint32_t{1});
  put(&header, uint32_t{0});
  put(&header, uint64_t{1});
  put(&header, static_cast<uint64_t>(body.size()));
  put(&header, crc32c(header));
  put(&header, uint32_t{0});
  std::ofstream(path, std::ios::binary | std::ios::trunc) << header << body;
}

// A payload of one f32 tensor with the given dims and 8 bytes of data.
std::string payload_with_shape(const std::vector<int64_t>& dims) {
  std::string p;
  put(&p, int64_t{0});
  put(&p, uint32_t{0});
  put(&p, uint32_t{0});
  put(&p, uint32_t{1});
  for (uint8_t b : {uint8_t{0}, uint8_t{0}, static_cast<uint8_t>(dims.size()), uint8_t{0}}) put(&p, b);
  for (int64_t d : dims) put(&p, d);
  return p + std::string(8, '\0');
}

// Made-up lengths and shapes with correct CRCs are kDataLoss naming the file and offset, not
// bad_alloc or an overflowed size.
TEST(PipelineDataset, CacheFileCraftedLengthOrShapeIsDataLoss) {
  ScratchDir dir;
  const std::string path = dir.path("crafted.cache");
  const std::string ok = payload_with_shape({2});
  struct Crafted {
    uint64_t length;
    std::string payload, expected;
  };
  const std::vector<Crafted> cases{
      {uint64_t{1} << 62, ok, "runs past the end of the body"},
      {ok.size() + 1, ok, "runs past the end of the body"},
      {0, payload_with_shape({1 << 20, 1 << 20}), "does not fit"},     // 4 TiB
      {0, payload_with_shape({int64_t{1} << 62, 4}), "does not fit"},  // numel overflows
      {0, payload_with_shape({int64_t{1} << 40, int64_t{1} << 40, 0}), "does not fit"},
  };
  for (const Crafted& c : cases) {
    write_crafted(path, c.length != 0 ? c.length : c.payload.size(), c.payload);
    SCOPED_TRACE(c.expected + " " + std::to_string(c.length));
    try {
      records_of(Dataset::range(0, 1).cache(path));
      FAIL() << "a crafted element was delivered";
    } catch (const Error& err) {
      std::string message = err.what();
      EXPECT_EQ(err.code(), ErrorCode::kDataLoss);
      EXPECT_NE(message.find(path), std::string::npos) << message;
      EXPECT_NE(message.find("element 0 at offset 40"), std::string::npos) << message;
      EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    }
  }
  // An empty tensor with huge other dimensions is well-formed (and its shape does not overflow).
  std::string empty = payload_with_shape({int64_t{1} << 20, 0});
  write_crafted(path, empty.size() - 8, empty.substr(0, empty.size() - 8));
  EXPECT_EQ(records_of(Dataset::range(0, 1).cache(path)), std::vector<int64_t>{0});
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

// A data set whose files were rewritten or touched gets a new cache file, not the old records.
TEST(PipelineDataset, ReplicaCacheFileNameFollowsFileSizesAndTimes) {
  ScratchDir dir;
  auto files = testing::write_labelled_files(dir.path("d"), {4, 4});
  PipelineConfig config = parse_pipeline_config("data:\n  files: " + dir.path("d-*.tfrecord") +
                                                "\n  cache_file: " + dir.path("c") +
                                                "\n  shuffle_buffer: 0\n  batch_size: 2\n"
                                                "  image: {format: raw, raw_shape: [2, 2, 1], height: 0, width: 0,"
                                                " augment: {random_resized_crop: false, horizontal_flip: false}}\n");
  auto one_pass = [&] { testing::labels_of(build_replica_pipelines(config, 1).datasets[0]); };
  one_pass();
  one_pass();
  EXPECT_EQ(count_named(dir, "c.replica-0-of-1."), 1);  // the same data set reuses its file
  fs::last_write_time(files[0], fs::last_write_time(files[0]) + std::chrono::seconds(10));
  one_pass();
  EXPECT_EQ(count_named(dir, "c.replica-0-of-1."), 2);
  testing::write_labelled_files(dir.path("d"), {4, 5});  // rewritten, file 1 with a record more
  one_pass();
  EXPECT_EQ(count_named(dir, "c.replica-0-of-1."), 3);
}

// Under record sharding each replica keeps records by position in the reading order. Replicas
// fill their caches in whichever epoch they first complete a pass; the caches must still cover
// every record exactly once, so the order ahead of a cache must not change with the epoch.
TEST(PipelineDataset, ReplicaCachesFilledInDifferentEpochsCoverEveryRecordOnce) {
  for (bool in_memory : {false, true}) {
    SCOPED_TRACE(in_memory ? "cache: true" : "cache_file");
    ScratchDir dir;
    auto files = testing::write_labelled_files(dir.path("d"), {5, 6, 7, 8, 9});
    PipelineConfig config = parse_pipeline_config(
        "data:\n  files: " + dir.path("d-*.tfrecord") + "\n" +
        (in_memory ? std::string("  cache: true\n") : "  cache_file: " + dir.path("c") + "\n") +
        "  shard_policy: data\n  shuffle_buffer: 16\n  seed: 5\n  batch_size: 2\n  drop_remainder: false\n"
        "  image: {format: raw, raw_shape: [2, 2, 1], height: 0, width: 0,"
        " augment: {random_resized_crop: false, horizontal_flip: false}}\n");
    ReplicaPipelines pipelines = build_replica_pipelines(config, 3);
    std::map<int64_t, int> seen;
    std::vector<std::vector<int64_t>> cached(3);
    for (int r = 0; r < 3; ++r) {  // replica r completes its first pass in epoch r
      cached[static_cast<size_t>(r)] = testing::labels_of(pipelines.datasets[static_cast<size_t>(r)], r);
      for (int64_t label : cached[static_cast<size_t>(r)]) ++seen[label];
    }
    ASSERT_EQ(seen.size(), 35u);
    for (const auto& [label, count] : seen) EXPECT_EQ(count, 1) << "label " << label;
    // Later epochs replay the caches (the TFRecords are gone): the same records, newly shuffled.
    for (const std::string& f : files) fs::remove(f);
    for (int r = 0; r < 3; ++r) {
      std::vector<int64_t> replay = testing::labels_of(pipelines.datasets[static_cast<size_t>(r)], 7);
      std::vector<int64_t> first = cached[static_cast<size_t>(r)];
      std::sort(replay.begin(), replay.end());
      std::sort(first.begin(), first.end());
      EXPECT_EQ(replay, first) << "replica " << r;
    }
  }
}

}  // namespace
}  // namespace tandem::data
