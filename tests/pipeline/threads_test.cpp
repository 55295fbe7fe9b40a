// The threads of a pipeline: bounded in bytes, stopped and joined when the pipeline is
// destroyed mid-epoch, and every stage's error reaches the consumer (with file and offset)
// instead of hanging it. Each test that could hang runs under a time limit.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "data/pipeline/bounded_queue.h"
#include "data/pipeline/dataset.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace tandem::data {
namespace {

using namespace std::chrono_literals;
using testing::finishes_within;
using testing::thread_count;

Dataset threaded_pipeline(const std::vector<std::string>& files) {
  return Dataset::from_files(files)
      .interleave([](const Element& f) { return Dataset::tfrecord(f.text); }, 2, 1, 2)
      .map([](Element e) { return e; }, 3)
      .prefetch(4);
}

std::vector<std::string> record_files(const testing::ScratchDir& dir, int files, int records) {
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    std::vector<std::string> recs(static_cast<size_t>(records), std::string(100, 'x'));
    paths.push_back(dir.path("f" + std::to_string(f) + ".tfrecord"));
    testing::write_tfrecord(paths.back(), recs);
  }
  return paths;
}

TEST(PipelineThreads, DestroyMidEpochLeavesNoThread) {
  testing::ScratchDir dir;
  auto files = record_files(dir, 4, 200);
  // Sanitizer runtimes start a helper thread with the process's first thread: start it now.
  std::thread([] {}).join();
  const int before = thread_count();
  ASSERT_TRUE(finishes_within(10s, [&] {
    DatasetIterator it = threaded_pipeline(files).repeat().make_iterator();
    Element e;
    for (int i = 0; i < 50; ++i) it.next(&e);
    std::this_thread::sleep_for(20ms);  // let every queue fill and every producer block
    EXPECT_GT(thread_count(), before);
  }));
  EXPECT_EQ(thread_count(), before);
}

TEST(PipelineThreads, CorruptRecordReachesConsumerWithFileAndOffset) {
  testing::ScratchDir dir;
  auto files = record_files(dir, 3, 50);
  {
    // Damage the data of record 10 of the second file: 16 framing bytes + 100 per record.
    std::fstream f(files[1], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10 * 116 + 12 + 5);
    f.put('!');
  }
  std::string message;
  ErrorCode code = ErrorCode::kInternal;
  int64_t delivered = 0;
  ASSERT_TRUE(finishes_within(10s, [&] {
    DatasetIterator it = threaded_pipeline(files).batch(8).prefetch(2).make_iterator();
    Element e;
    try {
      while (it.next(&e)) ++delivered;
    } catch (const Error& err) {
      message = err.what();
      code = err.code();
    }
    EXPECT_FALSE(it.next(&e));  // after the error: the end, not a hang
  }));
  EXPECT_EQ(code, ErrorCode::kDataLoss) << message;
  EXPECT_NE(message.find(files[1]), std::string::npos) << message;
  EXPECT_NE(message.find("corrupted record at " + std::to_string(10 * 116 + 12)), std::string::npos) << message;
  EXPECT_GT(delivered, 0);
}

TEST(PipelineThreads, MapErrorArrivesInOrder) {
  std::vector<int64_t> seen;
  std::string message;
  ASSERT_TRUE(finishes_within(10s, [&] {
    auto fn = [](Element e) {
      if (e.record == 37) throw_error(ErrorCode::kInvalidArgument, "bad element {}", e.record);
      return e;
    };
    DatasetIterator it = Dataset::range(0, 1000).map(fn, 4).prefetch(8).make_iterator();
    Element e;
    try {
      while (it.next(&e)) seen.push_back(e.record);
    } catch (const Error& err) {
      message = err.what();
    }
  }));
  EXPECT_EQ(message, "bad element 37");
  EXPECT_EQ(seen.size(), 37u);
}

TEST(PipelineThreads, MissingFileInInterleaveIsReported) {
  std::string message;
  ASSERT_TRUE(finishes_within(10s, [&] {
    DatasetIterator it = threaded_pipeline({"/nonexistent/x.tfrecord"}).make_iterator();
    Element e;
    try {
      it.next(&e);
    } catch (const Error& err) {
      message = err.what();
    }
  }));
  EXPECT_NE(message.find("/nonexistent/x.tfrecord"), std::string::npos) << message;
}

TEST(PipelineThreads, QueueIsBoundedInBytes) {
  BoundedQueue<int> queue(100, 1000);
  std::stop_source stop;
  ASSERT_TRUE(queue.push(1, 400, stop.get_token()));
  ASSERT_TRUE(queue.push(2, 400, stop.get_token()));
  std::atomic<bool> pushed{false};
  std::thread producer([&] { pushed = queue.push(3, 400, stop.get_token()); });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(pushed.load());  // 1200 bytes would exceed the bound
  int out = 0;
  ASSERT_TRUE(queue.pop(&out, stop.get_token()));
  producer.join();
  EXPECT_TRUE(pushed.load());
  EXPECT_EQ(queue.bytes(), 800u);
  // A single element larger than the bound still passes through an empty queue.
  BoundedQueue<int> small(4, 10);
  EXPECT_TRUE(small.push(7, 1000, stop.get_token()));
}

TEST(PipelineThreads, StopWakesABlockedPush) {
  BoundedQueue<int> queue(1, 1000);
  std::stop_source stop;
  ASSERT_TRUE(queue.push(1, 1, stop.get_token()));
  std::atomic<bool> result{true};
  std::thread producer([&] { result = queue.push(2, 1, stop.get_token()); });
  std::this_thread::sleep_for(20ms);
  stop.request_stop();
  producer.join();
  EXPECT_FALSE(result.load());
}

TEST(PipelineThreads, AFullQueuesProducerResumesOnceHalfIsDrained) {
  BoundedQueue<int> queue(4, 1000);
  std::stop_source stop;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(queue.push(i, 1, stop.get_token()));
  std::atomic<bool> pushed{false};
  std::thread producer([&] { pushed = queue.push(4, 1, stop.get_token()); });
  std::this_thread::sleep_for(50ms);  // the producer is blocked on the full queue
  int out = -1;
  ASSERT_TRUE(queue.pop(&out, stop.get_token()));
  EXPECT_EQ(out, 0);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(pushed.load());  // three of four left: no wake-up for a single free slot
  ASSERT_TRUE(queue.pop(&out, stop.get_token()));
  producer.join();  // two left, half the bound: the producer runs again
  EXPECT_TRUE(pushed.load());
  for (int expected = 2; expected <= 4; ++expected) {
    ASSERT_TRUE(queue.pop(&out, stop.get_token()));
    EXPECT_EQ(out, expected);
  }
}

TEST(PipelineThreads, PrefetchHoldsNoMoreThanItsByteBudget) {
  auto made = std::make_shared<std::atomic<int>>(0);
  auto big = [made](Element e) {
    ++*made;
    e.tensors = {Tensor::zeros(Shape{1 << 20}, DType::kU8)};
    return e;
  };
  PipelineBudget budget;
  budget.queue_bytes = (size_t{7} << 20) / 2;  // room for three 1 MiB elements
  DatasetIterator it = Dataset::range(0, 1000).map(big).prefetch(100).make_iterator(0, budget);
  Element e;
  ASSERT_TRUE(it.next(&e));
  std::this_thread::sleep_for(100ms);
  EXPECT_LE(made->load(), 5);  // one handed out, three queued, one waiting for room
}

TEST(PipelineThreads, AutotuneAddsThreadsWhileTheConsumerWaits) {
  auto slow = [](Element e) {
    std::this_thread::sleep_for(1ms);  // waiting, not computing: the test needs no free cores
    return e;
  };
  PipelineBudget budget;
  budget.cpu_threads = 4;
  DatasetIterator it = Dataset::range(0, 600).map(slow, kAutotune, true, "slow").make_iterator(0, budget);
  Element e;
  int64_t n = 0;
  while (it.next(&e)) ++n;
  EXPECT_EQ(n, 600);
  auto stages = it.stats()->snapshot();
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_EQ(stages[0].parallelism, 4);  // started at 2, grew to the budget
}

}  // namespace
}  // namespace tandem::data
