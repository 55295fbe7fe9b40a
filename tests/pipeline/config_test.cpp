// PipelineConfig from YAML: documented defaults, typed values, and errors that give the key
// path, the line and a did-you-mean.
#include <gtest/gtest.h>

#include "data/pipeline/pipeline_config.h"

namespace tandem::data {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_pipeline_config(yaml);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineConfigYaml, DefaultsAndValues) {
  PipelineConfig c = parse_pipeline_config(
      "model: resnet50\n"
      "data:\n"
      "  files: /data/train-*\n"
      "  shard_policy: data\n"
      "  num_parallel_calls: autotune\n"
      "  batch_size: 64\n"
      "  image:\n"
      "    layout: nchw\n"
      "    augment: {scale: [0.25, 1.0], horizontal_flip: false}\n");
  ASSERT_EQ(c.files.size(), 1u);
  EXPECT_EQ(c.shard_policy, ShardPolicy::kData);
  EXPECT_EQ(c.num_parallel_calls, kAutotune);
  EXPECT_EQ(c.batch_size, 64);
  EXPECT_EQ(c.image.augment.layout, ImageLayout::kNCHW);
  EXPECT_FLOAT_EQ(c.image.augment.crop_range.scale_min, 0.25f);
  EXPECT_FALSE(c.image.augment.horizontal_flip);
  EXPECT_EQ(c.shuffle_buffer, 10000);  // a default
  EXPECT_EQ(c.prefetch, kAutotune);
  EXPECT_TRUE(c.cache_file.empty());  // no file cache unless asked
}

TEST(PipelineConfigYaml, UnknownKeyNamesPathLineAndSuggestion) {
  std::string msg = error_of("data:\n  files: x\n  shufle_buffer: 10\n");
  EXPECT_NE(msg.find("data.shufle_buffer (line 3)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'shuffle_buffer'"), std::string::npos) << msg;
  msg = error_of("data:\n  files: x\n  image:\n    augment:\n      horizontal_flp: true\n");
  EXPECT_NE(msg.find("data.image.augment.horizontal_flp (line 5)"), std::string::npos) << msg;
}

TEST(PipelineConfigYaml, WrongTypesAndValues) {
  EXPECT_NE(error_of("data:\n  files: x\n  batch_size: many\n").find("data.batch_size (line 3): expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of("data:\n  files: x\n  shard_policy: fiel\n").find("did you mean 'file'"), std::string::npos);
  EXPECT_NE(error_of("data:\n  files: x\n  batch_size: 0\n").find("must be"), std::string::npos);
  EXPECT_NE(error_of("data:\n  batch_size: 4\n").find("data.files: required"), std::string::npos);
  EXPECT_NE(error_of("train: {}\n").find("no 'data' section"), std::string::npos);
}

TEST(PipelineConfigYaml, AbsurdThreadCountsAreRefusedNotStarted) {
  // 100,000 threads once aborted the process ("terminate called without an active exception").
  for (const char* key : {"num_parallel_calls", "num_parallel_reads", "cpu_threads"}) {
    std::string msg = error_of(std::string("data:\n  files: x\n  ") + key + ": 100000\n");
    EXPECT_NE(msg.find(std::string("data.") + key + " (line 3): 100000 threads is more than the 1024"),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(error_of("data:\n  files: x\n  num_parallel_calls: autotune\n  cpu_threads: 64\n"), "");
}

TEST(PipelineConfigYaml, AZeroOrNegativeStdIsRefused) {
  for (const char* std : {"[0, 0, 0]", "[0.5, -1, 0.5]"}) {
    std::string msg = error_of(std::string("data:\n  files: x\n  image:\n    std: ") + std + "\n");
    EXPECT_NE(msg.find("data.image.std (line 4): every value must be a positive number"), std::string::npos) << msg;
  }
  // A NaN is refused as a number first, as a NaN mean is.
  std::string msg = error_of("data:\n  files: x\n  image:\n    std: [0.5, 0.5, .nan]\n");
  EXPECT_NE(msg.find("data.image.std[2] (line 4): expected a finite number, got .nan"), std::string::npos) << msg;
  EXPECT_EQ(error_of("data:\n  files: x\n  image:\n    std: [0.25, 0.5, 1]\n"), "");
}

TEST(PipelineConfigYaml, ANonFiniteMeanIsRefused) {
  // A NaN mean passed through to every normalised pixel, and from there to the weights.
  std::string msg = error_of("data:\n  files: x\n  image:\n    mean: [.nan, 0.5, 0.5]\n");
  EXPECT_NE(msg.find("data.image.mean[0] (line 4): expected a finite number, got .nan"), std::string::npos) << msg;
  msg = error_of("data:\n  files: x\n  image:\n    mean: [0.5, -.inf, 0.5]\n");
  EXPECT_NE(msg.find("data.image.mean[1] (line 4): expected a finite number"), std::string::npos) << msg;
  PipelineConfig c = parse_pipeline_config("data:\n  files: x\n  image:\n    mean: [0.5, -0.25, 2]\n");
  EXPECT_FLOAT_EQ(c.image.augment.mean[1], -0.25f);
}

TEST(PipelineConfigYaml, ImageSidesAndChannelsMustFitTheirFields) {
  // 4294967324 read into an int was 28: a config asking for 4 G rows trained on 28 x 28 crops.
  std::string msg = error_of("data:\n  files: x\n  image:\n    height: 4294967324\n");
  EXPECT_NE(msg.find("data.image.height (line 4): must be in [0, 65535], got 4294967324"), std::string::npos) << msg;
  msg = error_of("data:\n  files: x\n  image:\n    width: 65536\n");
  EXPECT_NE(msg.find("data.image.width (line 4): must be in [0, 65535]"), std::string::npos) << msg;
  msg = error_of("data:\n  files: x\n  image:\n    augment: {crop_padding: 4294967300}\n");
  EXPECT_NE(msg.find("data.image.augment.crop_padding (line 4): must be in [0, 65535]"), std::string::npos) << msg;
  msg = error_of("data:\n  files: x\n  image:\n    channels: 4\n");
  EXPECT_NE(msg.find("data.image.channels (line 4): must be in [1, 3], got 4"), std::string::npos) << msg;
  PipelineConfig c = parse_pipeline_config(
      "data:\n  files: x\n  image:\n    height: 65535\n    width: 0\n    channels: 1\n");
  EXPECT_EQ(c.image.augment.height, 65535);
  EXPECT_EQ(c.image.augment.width, 0);
  EXPECT_EQ(c.image.augment.channels, 1);
}

TEST(PipelineConfigYaml, RawShapeIsThreeWholeSidesInRange) {
  // Read as floats and cast: -1 x -1 x 3 multiplied to a 3-byte image and 1.5 channels became 1.
  std::string msg = error_of("data:\n  files: x\n  image:\n    raw_shape: [-1, -1, 3]\n");
  EXPECT_NE(msg.find("data.image.raw_shape[0] (line 4): must be in [1, 65535], got -1"), std::string::npos) << msg;
  msg = error_of("data:\n  files: x\n  image:\n    raw_shape: [28, 28, 1.5]\n");
  EXPECT_NE(msg.find("data.image.raw_shape[2] (line 4): expected an integer, got '1.5'"), std::string::npos) << msg;
  msg = error_of("data:\n  files: x\n  image:\n    raw_shape: [28, 28]\n");
  EXPECT_NE(msg.find("data.image.raw_shape (line 4): expected [height, width, channels]"), std::string::npos) << msg;
  PipelineConfig c = parse_pipeline_config("data:\n  files: x\n  image:\n    raw_shape: [28, 28, 1]\n");
  EXPECT_EQ(c.image.raw_shape, (std::vector<int64_t>{28, 28, 1}));
}

TEST(PipelineConfigYaml, GlobalBatchSplitsOverReplicas) {
  PipelineConfig c = parse_pipeline_config("data:\n  files: x\n  global_batch_size: 256\n");
  EXPECT_EQ(replica_batch_size(c, 4), 64);
  EXPECT_EQ(replica_batch_size(c, 1), 256);
  try {
    replica_batch_size(c, 3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("256 does not divide over 3 replicas; nearest valid: 255 or 258"),
              std::string::npos)
        << e.what();
  }
  c.global_batch_size = 0;
  EXPECT_EQ(replica_batch_size(c, 3), 32);  // batch_size is per replica
}

}  // namespace
}  // namespace tandem::data
