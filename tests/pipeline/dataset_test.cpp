// The Dataset operations against tf.data's documented behaviour: order of interleave,
// shuffle as a seeded permutation, shard, batch, repeat, take, skip, cache and parallel map.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "data/pipeline/dataset.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace tandem::data {
namespace {

using testing::records_of;

std::vector<int64_t> iota(int64_t begin, int64_t end) {
  std::vector<int64_t> v(static_cast<size_t>(end - begin));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

Dataset repeated_value(int64_t x, int64_t times) {
  Element e;
  e.record = x;
  return Dataset::from_elements({e}).repeat(times);
}

TEST(PipelineDataset, RangeTakeSkipRepeat) {
  EXPECT_EQ(records_of(Dataset::range(0, 5)), iota(0, 5));
  EXPECT_EQ(records_of(Dataset::range(0, 10).skip(3).take(4)), iota(3, 7));
  EXPECT_EQ(records_of(Dataset::range(0, 3).repeat(2)), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(records_of(Dataset::range(0, 3).repeat().take(7)).size(), 7u);
  EXPECT_TRUE(records_of(Dataset::range(0, 0).repeat()).empty());  // never spins on an empty input
}

TEST(PipelineDataset, InterleaveMatchesTfDataDocumentedOrder) {
  // tf.data.Dataset.interleave's docstring: range(1, 6), each x repeated 6 times,
  // cycle_length=2, block_length=4 gives exactly this order.
  const std::vector<int64_t> expected{1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3,
                                      4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5};
  auto fn = [](const Element& e) { return repeated_value(e.record, 6); };
  EXPECT_EQ(records_of(Dataset::range(1, 6).interleave(fn, 2, 4)), expected);
  // Reading ahead on threads does not change the order.
  EXPECT_EQ(records_of(Dataset::range(1, 6).interleave(fn, 2, 4, 3)), expected);
}

TEST(PipelineDataset, InterleaveCycleOneIsConcatenation) {
  auto fn = [](const Element& e) { return Dataset::range(e.record * 10, e.record * 10 + 3); };
  EXPECT_EQ(records_of(Dataset::range(0, 3).interleave(fn, 1)),
            (std::vector<int64_t>{0, 1, 2, 10, 11, 12, 20, 21, 22}));
  EXPECT_EQ(records_of(Dataset::range(0, 3).interleave(fn, 3)),
            (std::vector<int64_t>{0, 10, 20, 1, 11, 21, 2, 12, 22}));
}

TEST(PipelineDataset, ShuffleIsASeededPermutation) {
  Dataset ds = Dataset::range(0, 100).shuffle(30, 7);
  std::vector<int64_t> a = records_of(ds);
  std::vector<int64_t> b = records_of(ds);
  EXPECT_NE(a, iota(0, 100));
  EXPECT_EQ(a, b);  // same seed, same epoch: same order
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(0, 100));
  EXPECT_NE(records_of(Dataset::range(0, 100).shuffle(30, 8)), a);  // another seed
}

TEST(PipelineDataset, ReshuffleEachIteration) {
  Dataset reshuffled = Dataset::range(0, 50).shuffle(50, 3, true);
  EXPECT_NE(records_of(reshuffled, 0), records_of(reshuffled, 1));
  EXPECT_EQ(records_of(reshuffled, 1), records_of(reshuffled, 1));
  Dataset fixed = Dataset::range(0, 50).shuffle(50, 3, false);
  EXPECT_EQ(records_of(fixed, 0), records_of(fixed, 1));
  // Under repeat each pass is the next epoch, so it is reshuffled as well.
  std::vector<int64_t> two = records_of(reshuffled.repeat(2));
  EXPECT_NE(std::vector<int64_t>(two.begin(), two.begin() + 50), std::vector<int64_t>(two.begin() + 50, two.end()));
}

TEST(PipelineDataset, ShardTakesEveryNth) {
  EXPECT_EQ(records_of(Dataset::range(0, 10).shard(3, 1)), (std::vector<int64_t>{1, 4, 7}));
  EXPECT_THROW(Dataset::range(0, 10).shard(3, 3), Error);
}

TEST(PipelineDataset, BatchStacksAndDropsRemainder) {
  DatasetIterator it = Dataset::range(0, 7).batch(3).make_iterator();
  Element e;
  std::vector<int64_t> sizes;
  while (it.next(&e)) {
    ASSERT_EQ(e.tensors.size(), 1u);
    sizes.push_back(e.tensors[0].dim(0));
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(testing::labels_of(Dataset::range(0, 7).batch(3, true)), iota(0, 6));
}

TEST(PipelineDataset, BatchOfMismatchedShapesNamesTheElement) {
  Element a, b;
  a.tensors.push_back(Tensor::zeros(Shape{2}, DType::kU8));
  b.tensors.push_back(Tensor::zeros(Shape{3}, DType::kU8));
  b.file = "f.tfrecord";
  b.record = 9;
  DatasetIterator it = Dataset::from_elements({a, b}).batch(2).make_iterator();
  Element out;
  try {
    it.next(&out);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f.tfrecord record 9"), std::string::npos) << e.what();
  }
}

Element plus_thousand(Element e) {
  e.record += 1000;
  return e;
}

TEST(PipelineDataset, ParallelMapKeepsOrderWhenDeterministic) {
  Dataset ds = Dataset::range(0, 500).map(plus_thousand, 4, true);
  EXPECT_EQ(records_of(ds), iota(1000, 1500));
  std::vector<int64_t> any = records_of(Dataset::range(0, 500).map(plus_thousand, 4, false));
  std::sort(any.begin(), any.end());
  EXPECT_EQ(any, iota(1000, 1500));
  EXPECT_EQ(records_of(Dataset::range(0, 100).map(plus_thousand, kAutotune).prefetch(kAutotune)), iota(1000, 1100));
}

TEST(PipelineDataset, CacheReplaysTheFirstPass) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  Dataset ds = Dataset::range(0, 20)
                   .map([calls](Element e) {
                     ++*calls;
                     return e;
                   })
                   .cache()
                   .repeat(3);
  EXPECT_EQ(records_of(ds).size(), 60u);
  EXPECT_EQ(calls->load(), 20);
}

TEST(PipelineDataset, ListFilesSortsAndShufflesPerEpoch) {
  testing::ScratchDir dir;
  for (const char* name : {"b.tfrecord", "a.tfrecord", "c.tfrecord", "d.tfrecord"}) {
    testing::write_tfrecord(dir.path(name), {});
  }
  DatasetIterator it = Dataset::list_files(dir.path("*.tfrecord")).make_iterator();
  Element e;
  ASSERT_TRUE(it.next(&e));
  EXPECT_EQ(e.text, dir.path("a.tfrecord"));
  EXPECT_THROW(Dataset::list_files(dir.path("*.nothing")), Error);
}

}  // namespace
}  // namespace tandem::data
