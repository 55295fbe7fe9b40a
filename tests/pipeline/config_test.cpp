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
  for (const char* std : {"[0, 0, 0]", "[0.5, -1, 0.5]", "[0.5, 0.5, .nan]"}) {
    std::string msg = error_of(std::string("data:\n  files: x\n  image:\n    std: ") + std + "\n");
    EXPECT_NE(msg.find("data.image.std (line 4): every value must be a positive number"), std::string::npos) << msg;
  }
  EXPECT_EQ(error_of("data:\n  files: x\n  image:\n    std: [0.25, 0.5, 1]\n"), "");
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
