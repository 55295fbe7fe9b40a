// BufferTuner fed a timeline by hand: it doubles a buffer only when the consumer waited although
// the buffer had filled, never beyond its memory budget, and logs each change with its reason.
// Then prefetch(autotune) against a producer with periodic stalls grows on its own.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "data/pipeline/autotune.h"
#include "data/pipeline/dataset.h"

namespace tandem::data {
namespace {

using namespace std::chrono_literals;

class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~CapturedLog() { spdlog::default_logger()->sinks().pop_back(); }
  std::string text() const {
    std::string log;
    for (const auto& line : sink_->last_formatted()) log += line;
    return log;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

// One window of 32 elements of `bytes`, 10 ms apart, each after `waited` s; the buffer filled
// once in the window when `filled`. True when the size changed.
bool window(BufferTuner& tuner, double* now, double waited, bool filled, size_t bytes = 1000) {
  bool changed = false;
  for (int i = 0; i < BufferTuner::kWindowElements; ++i) {
    *now += 0.01;
    changed = tuner.record(waited, bytes, filled && i == 3, *now) || changed;
  }
  return changed;
}

TEST(PipelineThreads, BufferTunerGrowsOnlyWhenTheConsumerWaitsAfterAFill) {
  CapturedLog log;
  BufferTuner tuner("prefetch", 4, size_t{1} << 20, true);
  double now = 100;
  EXPECT_FALSE(window(tuner, &now, 0.002, false));  // waited 20%, but the buffer never filled
  EXPECT_FALSE(window(tuner, &now, 0.0, true));     // filled, and nobody waited
  EXPECT_FALSE(window(tuner, &now, 0.0004, true));  // waited 4%: under the threshold
  EXPECT_EQ(tuner.size(), 4u);
  EXPECT_TRUE(window(tuner, &now, 0.002, true));
  EXPECT_EQ(tuner.size(), 8u);
  EXPECT_TRUE(window(tuner, &now, 0.002, true));
  EXPECT_EQ(tuner.size(), 16u);
  EXPECT_NE(log.text().find("autotune: prefetch buffer_size 8 -> 16 (the consumer waited 20% of the last 0.32 s"),
            std::string::npos)
      << log.text();

  BufferTuner fixed("prefetch", 4, size_t{1} << 20, false);
  EXPECT_FALSE(window(fixed, &now, 0.002, true));
  EXPECT_EQ(fixed.size(), 4u);
}

TEST(PipelineThreads, BufferTunerStopsAtTheMemoryBudget) {
  CapturedLog log;
  BufferTuner tuner("prefetch", 4, 10 * 1000, true);  // room for ten elements of 1000 bytes
  double now = 0;
  EXPECT_TRUE(window(tuner, &now, 0.005, true));
  EXPECT_EQ(tuner.size(), 8u);
  EXPECT_TRUE(window(tuner, &now, 0.005, true));
  EXPECT_EQ(tuner.size(), 10u);  // capped, not doubled
  EXPECT_FALSE(window(tuner, &now, 0.005, true));
  EXPECT_FALSE(window(tuner, &now, 0.005, true));
  EXPECT_EQ(tuner.size(), 10u);
  // Larger elements lower the cap, but a buffer never shrinks below what it holds.
  EXPECT_FALSE(window(tuner, &now, 0.005, true, 5000));
  EXPECT_EQ(tuner.size(), 10u);
  std::string text = log.text();
  size_t first = text.find("fill the memory budget");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("fill the memory budget", first + 1), std::string::npos) << "logged more than once";
}

// Drains ds as a consumer that needs 2 ms per element; the captured log of the pass.
std::string consume_slowly(const Dataset& ds, int64_t count) {
  CapturedLog log;
  DatasetIterator it = ds.make_iterator();
  Element e;
  int64_t expected = 0;
  while (it.next(&e)) {
    EXPECT_EQ(e.record, expected++);
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_EQ(expected, count);
  return log.text();
}

TEST(PipelineThreads, PrefetchAutotuneGrowsForAStallingProducer) {
  // Every 16th element stalls 20 ms; otherwise the producer outruns the consumer (2 ms each),
  // so 4 buffered elements cannot cover a stall but a larger buffer can.
  auto stalling = [](Element e) {
    if (e.record % 16 == 15) std::this_thread::sleep_for(20ms);
    return e;
  };
  Dataset ds = Dataset::range(0, 320).map(stalling).prefetch(kAutotune);
  std::string first = consume_slowly(ds, 320);
  EXPECT_NE(first.find("autotune: prefetch buffer_size 4 -> 8"), std::string::npos) << first;
  // The next iterator of the same dataset (the next epoch) starts where this one got to.
  std::string second = consume_slowly(ds, 320);
  EXPECT_EQ(second.find("buffer_size 4 ->"), std::string::npos) << second;
}

TEST(PipelineThreads, AutotunedThreadsCarryToTheNextIterator) {
  auto slow = [](Element e) {
    std::this_thread::sleep_for(1ms);  // waiting, not computing: the test needs no free cores
    return e;
  };
  PipelineBudget budget;
  budget.cpu_threads = 4;
  Dataset ds = Dataset::range(0, 600).map(slow, kAutotune, true, "slow");
  {
    DatasetIterator it = ds.make_iterator(0, budget);
    EXPECT_EQ(it.stats()->snapshot()[0].parallelism, 2);  // half the budget to start
    Element e;
    while (it.next(&e)) {
    }
    ASSERT_EQ(it.stats()->snapshot()[0].parallelism, 4);
  }
  DatasetIterator next_epoch = ds.make_iterator(1, budget);
  EXPECT_EQ(next_epoch.stats()->snapshot()[0].parallelism, 4);
}

TEST(PipelineThreads, InterleaveAutotuneAdmitsMoreReadersWhileTheConsumerWaits) {
  // Eight inputs of 40 elements, each element 1 ms to read: with 2 of 4 readers the consumer
  // waits nearly all the time, so the tuner admits more.
  auto slow = [](Element e) {
    std::this_thread::sleep_for(1ms);
    return e;
  };
  auto inputs = [slow](const Element& v) { return Dataset::range(v.record * 100, v.record * 100 + 40).map(slow); };
  PipelineBudget budget;
  budget.cpu_threads = 4;  // so num_parallel_calls=autotune is > 1 whatever the machine
  Dataset ds = Dataset::range(0, 8).interleave(inputs, 4, 1, kAutotune, false);
  CapturedLog log;
  DatasetIterator it = ds.make_iterator(0, budget);
  Element e;
  std::vector<int64_t> got;
  while (it.next(&e)) got.push_back(e.record);
  EXPECT_EQ(got.size(), 320u);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(std::adjacent_find(got.begin(), got.end()), got.end());  // none twice
  EXPECT_NE(log.text().find("autotune: interleave num_parallel_calls 2 -> 3"), std::string::npos) << log.text();
}

}  // namespace
}  // namespace tandem::data
