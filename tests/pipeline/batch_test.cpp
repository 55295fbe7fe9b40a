// batch behind a map on threads, where the map's workers copy their rows into the batch: the same
// batches as batching in one thread (short last batch, drop_remainder), and errors (a map
// error, elements that do not stack) arrive after the batches before them, naming the element.
#include <gtest/gtest.h>

#include <cstring>

#include "data/pipeline/dataset.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace tandem::data {
namespace {

// Element v -> {u8 [3, 2] filled with bytes of v, i64 label v}; element `odd` (if any) is [2, 3].
MapFn rows_of(int64_t odd = -1) {
  return [odd](Element e) {
    Tensor image = Tensor::empty(e.record == odd ? Shape{2, 3} : Shape{3, 2}, DType::kU8);
    for (int i = 0; i < 6; ++i) image.data<uint8_t>()[i] = static_cast<uint8_t>(e.record * 7 + i);
    e.tensors = {image, scalar_i64(e.record)};
    return e;
  };
}

struct Batches {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<int64_t> first_records;
};

Batches drain(const Dataset& ds) {
  Batches out;
  DatasetIterator it = ds.make_iterator();
  Element b;
  while (it.next(&b)) {
    std::vector<uint8_t> bytes;
    for (const Tensor& t : b.tensors) {
      const auto* p = static_cast<const uint8_t*>(t.raw_data());
      bytes.insert(bytes.end(), p, p + t.nbytes());
    }
    out.bytes.push_back(bytes);
    out.first_records.push_back(b.record);
  }
  return out;
}

TEST(PipelineBatch, WorkersPlacingRowsGiveTheBatchesOfOneThread) {
  for (bool drop : {false, true}) {
    Batches one = drain(Dataset::range(0, 23).map(rows_of(), 1).batch(5, drop));
    Batches three = drain(Dataset::range(0, 23).map(rows_of(), 3).batch(5, drop));
    EXPECT_EQ(three.bytes, one.bytes) << "drop_remainder " << drop;
    EXPECT_EQ(three.first_records, one.first_records);
    ASSERT_EQ(one.bytes.size(), drop ? 4u : 5u);
    EXPECT_EQ(one.bytes.back().size(), drop ? 5u * (6 + 8) : 3u * (6 + 8));
  }
  // Batch shape: [rows, ...] for each component.
  DatasetIterator it = Dataset::range(0, 7).map(rows_of(), 3).batch(4).make_iterator();
  Element b;
  ASSERT_TRUE(it.next(&b));
  EXPECT_EQ(b.tensors[0].shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(b.tensors[1].shape(), (Shape{4}));
  ASSERT_TRUE(it.next(&b));
  EXPECT_EQ(b.tensors[0].shape(), (Shape{3, 3, 2}));
  EXPECT_EQ(b.tensors[1].data<int64_t>()[2], 6);
  EXPECT_FALSE(it.next(&b));
}

TEST(PipelineBatch, ElementsThatDoNotStackAreAnErrorNamingTheElement) {
  DatasetIterator it = Dataset::range(0, 20).map(rows_of(6), 3).batch(4).make_iterator();
  Element b;
  ASSERT_TRUE(it.next(&b));  // elements 0-3
  try {
    it.next(&b);
    FAIL() << "a batch with a [2, 3] image among [3, 2] ones";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 6"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("one size"), std::string::npos) << e.what();
  }
}

TEST(PipelineBatch, AMapErrorArrivesAfterTheBatchesBeforeIt) {
  MapFn fail_at_9 = [](Element e) {
    if (e.record == 9) throw Error(ErrorCode::kDataLoss, "element 9 is broken");
    return rows_of()(std::move(e));
  };
  DatasetIterator it = Dataset::range(0, 20).map(fail_at_9, 3).batch(4).make_iterator();
  Element b;
  ASSERT_TRUE(it.next(&b));
  ASSERT_TRUE(it.next(&b));
  EXPECT_EQ(b.record, 4);
  EXPECT_THROW(it.next(&b), Error);
}

}  // namespace
}  // namespace tandem::data
