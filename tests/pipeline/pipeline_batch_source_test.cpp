// The pipeline as a BatchSource: named tensors from any batched dataset, the same batches for
// the same epoch (the resume promise), and a clear error when the names do not fit.
#include <gtest/gtest.h>

#include "data/pipeline/pipeline_batch_source.h"
#include "engine/core/error.h"

namespace tandem::data {
namespace {

Dataset tokens_and_labels(int n) {
  std::vector<Element> elements;
  for (int i = 0; i < n; ++i) {
    Element e;
    Tensor tokens = Tensor::empty({3}, DType::kI64);
    for (int j = 0; j < 3; ++j) tokens.data<int64_t>()[j] = i * 10 + j;
    e.tensors = {tokens, scalar_i64(i % 2)};
    elements.push_back(std::move(e));
  }
  return Dataset::from_elements(std::move(elements)).shuffle(8, 5).batch(4, true);
}

TEST(PipelineBatchSource, NamesTheTensorsAndRepeatsAnEpoch) {
  PipelineBatchSource source(tokens_and_labels(8), std::vector<std::string>{"tokens", "label"});
  Batch batch;
  std::vector<uint32_t> first;
  for (int pass = 0; pass < 2; ++pass) {
    source.start_epoch(3);
    std::vector<uint32_t> prints;
    while (source.next(batch)) {
      EXPECT_EQ(batch.at("tokens").shape(), Shape({4, 3}));
      EXPECT_EQ(batch.at("label").shape(), Shape({4}));
      prints.push_back(batch_fingerprint(batch));
    }
    EXPECT_EQ(prints.size(), 2u);
    if (pass == 0) first = prints;
    EXPECT_EQ(prints, first) << "epoch 3 twice must give the same batches";
  }
}

TEST(PipelineBatchSource, AnotherNumberOfNamesIsAnError) {
  PipelineBatchSource source(tokens_and_labels(4), std::vector<std::string>{"tokens"});
  source.start_epoch(0);
  Batch batch;
  try {
    source.next(batch);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 tensor(s) for the 1 name(s) given (tokens)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::data
