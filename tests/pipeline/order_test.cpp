// deterministic: true gives the same elements in the same order whatever the thread timing;
// deterministic: false hands out whatever is ready, so one slow element (map) or one slow input
// (interleave) does not hold back the others, and still every element comes exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "data/pipeline/dataset.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace tandem::data {
namespace {

using namespace std::chrono_literals;
using testing::finishes_within;
using testing::records_of;

// Blocks until the consumer has taken `count` elements, or 5 s pass: a wrong order then
// fails the test instead of hanging it.
void wait_for_consumer(const std::atomic<int>& delivered, int count) {
  auto until = std::chrono::steady_clock::now() + 5s;
  while (delivered.load() < count && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
}

std::vector<int64_t> drain_counting(const Dataset& ds, std::atomic<int>* delivered) {
  std::vector<int64_t> out;
  DatasetIterator it = ds.make_iterator();
  Element e;
  while (it.next(&e)) {
    out.push_back(e.record);
    ++*delivered;
  }
  return out;
}

int64_t position_of(const std::vector<int64_t>& v, int64_t value) {
  return std::find(v.begin(), v.end(), value) - v.begin();
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int64_t> iota(int64_t begin, int64_t end) {
  std::vector<int64_t> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

TEST(PipelineThreads, MapNotDeterministicDoesNotWaitForASlowElement) {
  auto delivered = std::make_shared<std::atomic<int>>(0);
  auto slow_first = [delivered](Element e) {
    if (e.record == 0) wait_for_consumer(*delivered, 10);
    return e;
  };
  std::vector<int64_t> got;
  ASSERT_TRUE(finishes_within(20s, [&] { got = drain_counting(Dataset::range(0, 40).map(slow_first, 4, false),
                                                              delivered.get()); }));
  EXPECT_GE(position_of(got, 0), 10);
  EXPECT_EQ(sorted(got), iota(0, 40));  // every element exactly once
}

TEST(PipelineThreads, MapDeterministicKeepsOrderBehindASlowElement) {
  auto slow_first = [](Element e) {
    if (e.record == 0) std::this_thread::sleep_for(50ms);
    return e;
  };
  EXPECT_EQ(records_of(Dataset::range(0, 40).map(slow_first, 4, true)), iota(0, 40));
}

// Three inputs of ten elements (v*100 ...), the first of input 0 slow.
Dataset three_inputs(const std::function<Element(Element)>& fn, int64_t parallel, bool deterministic) {
  return Dataset::range(0, 3).interleave(
      [fn](const Element& v) { return Dataset::range(v.record * 100, v.record * 100 + 10).map(fn); }, 3, 1,
      parallel, deterministic);
}

TEST(PipelineThreads, InterleaveNotDeterministicDoesNotWaitForASlowInput) {
  auto delivered = std::make_shared<std::atomic<int>>(0);
  auto slow_first = [delivered](Element e) {
    if (e.record == 0) wait_for_consumer(*delivered, 5);
    return e;
  };
  std::vector<int64_t> got;
  ASSERT_TRUE(finishes_within(20s, [&] { got = drain_counting(three_inputs(slow_first, 3, false), delivered.get()); }));
  EXPECT_GE(position_of(got, 0), 5);
  std::vector<int64_t> all = iota(0, 10);
  for (int64_t v : iota(100, 110)) all.push_back(v);
  for (int64_t v : iota(200, 210)) all.push_back(v);
  EXPECT_EQ(sorted(got), all);
  // Each input's own elements keep their order.
  std::vector<int64_t> first_input;
  std::copy_if(got.begin(), got.end(), std::back_inserter(first_input), [](int64_t v) { return v < 100; });
  EXPECT_EQ(first_input, iota(0, 10));
}

TEST(PipelineThreads, InterleaveDeterministicKeepsTfDataOrderBehindASlowInput) {
  auto slow_first = [](Element e) {
    if (e.record == 0) std::this_thread::sleep_for(50ms);
    return e;
  };
  std::vector<int64_t> expected;
  for (int64_t i = 0; i < 10; ++i) {
    for (int64_t v = 0; v < 3; ++v) expected.push_back(v * 100 + i);
  }
  EXPECT_EQ(records_of(three_inputs(slow_first, 3, true)), expected);
  EXPECT_EQ(records_of(three_inputs(slow_first, 1, false)), expected);  // no threads: nothing to reorder
}

TEST(PipelineThreads, DeterministicPipelineGivesTheSameOrderOnEveryRun) {
  auto jitter = [](Element e) {
    std::this_thread::sleep_for(std::chrono::microseconds((e.record * 7919) % 300));
    return e;
  };
  auto pipeline = [&] {
    return Dataset::range(0, 4)
        .interleave([](const Element& v) { return Dataset::range(v.record * 50, v.record * 50 + 50); }, 2, 3, 2,
                    true)
        .shuffle(32, 7)
        .map(jitter, 4, true)
        .prefetch(kAutotune);
  };
  std::vector<int64_t> first = records_of(pipeline());
  EXPECT_EQ(first.size(), 200u);
  EXPECT_EQ(records_of(pipeline()), first);
}

TEST(PipelineThreads, NotDeterministicInterleaveCarriesErrorsAndStopsMidEpoch) {
  testing::ScratchDir dir;
  std::vector<std::string> files{dir.path("a.tfrecord"), "/nonexistent/b.tfrecord"};
  testing::write_tfrecord(files[0], std::vector<std::string>(100, "x"));
  std::string message;
  ASSERT_TRUE(finishes_within(10s, [&] {
    try {
      records_of(Dataset::from_files(files).interleave(
          [](const Element& f) { return Dataset::tfrecord(f.text); }, 2, 1, 2, false));
    } catch (const Error& err) {
      message = err.what();
    }
  }));
  EXPECT_NE(message.find("/nonexistent/b.tfrecord"), std::string::npos) << message;

  std::thread([] {}).join();
  const int before = testing::thread_count();
  ASSERT_TRUE(finishes_within(10s, [&] {
    DatasetIterator it = Dataset::from_files({files[0], files[0], files[0]})
                             .repeat()
                             .interleave([](const Element& f) { return Dataset::tfrecord(f.text); }, 3, 1, 3, false)
                             .make_iterator();
    Element e;
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(it.next(&e));
    std::this_thread::sleep_for(20ms);  // let the readers fill the queue and block
  }));
  EXPECT_EQ(testing::thread_count(), before);
}

}  // namespace
}  // namespace tandem::data
