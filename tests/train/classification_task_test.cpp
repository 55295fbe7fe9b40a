// The built-in image classification task: the first batch against the configured model input
// (images of another size or channel count, and labels that do not match the batch, are refused
// naming the config keys), top-k counting, and named tensors.
#include <gtest/gtest.h>

#include <limits>

#include "engine/core/error.h"
#include "engine/train/classification_task.h"

namespace tandem::train {
namespace {

Batch batch_of(const Shape& x, int64_t labels) {
  Batch b;
  b.set(kImage, Tensor::zeros(x));
  b.set(kLabel, Tensor::zeros({labels}, DType::kI64));
  return b;
}

std::string error_of(const Batch& b, const ModelConfig& m) {
  try {
    ImageClassification(m, 0.0f).check_batch(b, "training data");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(ImageClassificationTask, MatchingBatchesPass) {
  ModelConfig m{.name = "mlp", .num_classes = 10, .in_channels = 1, .input_size = 28};
  EXPECT_EQ(error_of(batch_of({4, 1, 28, 28}, 4), m), "");
  m.input_size = 0;  // a model that takes any size
  EXPECT_EQ(error_of(batch_of({4, 1, 28, 64}, 4), m), "");
}

TEST(ImageClassificationTask, AnotherImageSizeNamesTheKeys) {
  ModelConfig m{.name = "mlp", .num_classes = 10, .in_channels = 1, .input_size = 28};
  for (const Shape& wrong : {Shape({4, 1, 28, 64}), Shape({4, 1, 56, 14}), Shape({4, 3, 28, 28})}) {
    const std::string what = error_of(batch_of(wrong, 4), m);
    EXPECT_NE(what.find("the training data gives images of"), std::string::npos) << what;
    EXPECT_NE(what.find("model.input_size 28"), std::string::npos) << what;
    EXPECT_NE(what.find("model.in_channels 1"), std::string::npos) << what;
    EXPECT_NE(what.find("raw_shape"), std::string::npos) << what;
  }
}

TEST(ImageClassificationTask, LabelsMustMatchTheBatch) {
  ModelConfig m{.name = "mlp", .num_classes = 10, .in_channels = 1, .input_size = 28};
  EXPECT_NE(error_of(batch_of({4, 1, 28, 28}, 3), m).find("3 label(s) ([3]) for a batch of 4"), std::string::npos);
  EXPECT_NE(error_of(batch_of({4, 28, 28}, 4), m).find("takes (N, C, H, W) images"), std::string::npos);
}

TEST(ImageClassificationTask, AMissingImageNamesWhatTheBatchHas) {
  ModelConfig m{.name = "mlp", .num_classes = 10, .in_channels = 1, .input_size = 28};
  Batch b;
  b.set("tokens", Tensor::zeros({4, 16}, DType::kI64));
  const std::string what = error_of(b, m);
  EXPECT_NE(what.find("tokens i64[4, 16]"), std::string::npos) << what;
  EXPECT_NE(what.find("images named 'image'"), std::string::npos) << what;
}

TEST(ImageClassificationTask, TopKCountsTiesForTheLabel) {
  // Row 0: label 2 is the largest; row 1: label 0 ties with class 1; row 2: label 1 is third.
  Tensor logits = Tensor::from_vector({0.1f, 0.2f, 0.9f, 0.5f, 0.5f, 0.0f, 0.9f, 0.1f, 0.5f}, {3, 3});
  Tensor labels = Tensor::zeros({3}, DType::kI64);
  int64_t* y = labels.data<int64_t>();
  y[0] = 2;
  y[1] = 0;
  y[2] = 1;
  EXPECT_EQ(count_top_k(logits, labels, 1), 2);
  EXPECT_EQ(count_top_k(logits, labels, 2), 2);
  EXPECT_EQ(count_top_k(logits, labels, 3), 3);
}

TEST(ImageClassificationTask, ARowWithANaNIsNeverCorrect) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Row 0: every logit NaN (a model gone NaN); row 1: only the label's; row 2: another class's.
  Tensor logits = Tensor::from_vector({nan, nan, nan, 0.1f, nan, 0.2f, 0.9f, 0.1f, nan}, {3, 3});
  Tensor labels = Tensor::zeros({3}, DType::kI64);
  labels.data<int64_t>()[1] = 1;
  for (int k : {1, 3, 5}) EXPECT_EQ(count_top_k(logits, labels, k), 0) << "top-" << k;
}

TEST(Batch, SetReplacesByNameAndAtNamesWhatIsThere) {
  Batch b;
  b.set("image", Tensor::zeros({2, 3}));
  b.set("label", Tensor::zeros({2}, DType::kI64));
  b.set("image", Tensor::zeros({5, 3}));
  EXPECT_EQ(b.tensors().size(), 2u);
  EXPECT_EQ(b.size(), 5);
  EXPECT_EQ(b.at("image").dim(0), 5);
  try {
    (void)b.at("tokens");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("no tensor named 'tokens'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("label"), std::string::npos) << e.what();
  }
}

TEST(Batch, FingerprintsTellBatchesApart) {
  Batch a;
  a.set("x", Tensor::from_vector({1, 2, 3, 4}, {2, 2}));
  Batch same;
  same.set("x", Tensor::from_vector({1, 2, 3, 4}, {2, 2}));
  Batch other_values;
  other_values.set("x", Tensor::from_vector({1, 2, 3, 5}, {2, 2}));
  Batch other_shape;
  other_shape.set("x", Tensor::from_vector({1, 2, 3, 4}, {4, 1}));
  Batch other_name;
  other_name.set("y", Tensor::from_vector({1, 2, 3, 4}, {2, 2}));
  EXPECT_EQ(batch_fingerprint(a), batch_fingerprint(same));
  EXPECT_NE(batch_fingerprint(a), batch_fingerprint(other_values));
  EXPECT_NE(batch_fingerprint(a), batch_fingerprint(other_shape));
  EXPECT_NE(batch_fingerprint(a), batch_fingerprint(other_name));
}

}  // namespace
}  // namespace tandem::train
