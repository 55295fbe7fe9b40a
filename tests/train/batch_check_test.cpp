// The first batch against the configured model input: images of another size or channel count,
// and labels that do not match the batch, are refused naming the config keys.
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/train/batch_check.h"

namespace tandem::train {
namespace {

Batch batch_of(const Shape& x, int64_t labels) {
  return {Tensor::zeros(x), Tensor::zeros({labels}, DType::kI64)};
}

std::string error_of(const Batch& b, const ModelConfig& m) {
  try {
    check_batch_matches_model(b, m, "training data");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(BatchCheck, MatchingBatchesPass) {
  ModelConfig m{.name = "mlp", .num_classes = 10, .in_channels = 1, .input_size = 28};
  EXPECT_EQ(error_of(batch_of({4, 1, 28, 28}, 4), m), "");
  m.input_size = 0;  // a model that takes any size
  EXPECT_EQ(error_of(batch_of({4, 1, 28, 64}, 4), m), "");
}

TEST(BatchCheck, AnotherImageSizeNamesTheKeys) {
  ModelConfig m{.name = "mlp", .num_classes = 10, .in_channels = 1, .input_size = 28};
  for (const Shape& wrong : {Shape({4, 1, 28, 64}), Shape({4, 1, 56, 14}), Shape({4, 3, 28, 28})}) {
    const std::string what = error_of(batch_of(wrong, 4), m);
    EXPECT_NE(what.find("the training data gives images of"), std::string::npos) << what;
    EXPECT_NE(what.find("model.input_size 28"), std::string::npos) << what;
    EXPECT_NE(what.find("model.in_channels 1"), std::string::npos) << what;
    EXPECT_NE(what.find("raw_shape"), std::string::npos) << what;
  }
}

TEST(BatchCheck, LabelsMustMatchTheBatch) {
  ModelConfig m{.name = "mlp", .num_classes = 10, .in_channels = 1, .input_size = 28};
  EXPECT_NE(error_of(batch_of({4, 1, 28, 28}, 3), m).find("3 label(s) ([3]) for a batch of 4"), std::string::npos);
  EXPECT_NE(error_of(batch_of({4, 28, 28}, 4), m).find("takes (N, C, H, W) images"), std::string::npos);
}

}  // namespace
}  // namespace tandem::train
