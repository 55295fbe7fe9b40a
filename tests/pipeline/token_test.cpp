// Token windows through the input pipeline (data.tokens): the config section, batches of
// (N, length) i64 with the records' values, bad records named by file and record, and the
// stages shared with images (shuffle, shard, cache, resume) on token records.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/pipeline/pipeline_batch_source.h"
#include "data/pipeline/pipeline_config.h"
#include "data/pipeline/replica_pipeline.h"
#include "engine/core/error.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace tandem::data {
namespace {

using testing::ScratchDir;
constexpr int64_t kLength = 5;

std::string token_record(const std::vector<int64_t>& tokens) { return testing::int64_example("tokens", tokens); }

// Window k holds (k, k + 1, ..., k + 4) mod 256: its first token names it.
std::vector<int64_t> window(int64_t k) {
  std::vector<int64_t> w;
  for (int64_t j = 0; j < kLength; ++j) w.push_back((k + j) % 256);
  return w;
}

// counts[i] windows in file "<dir>/w-<i>.tfrecord", numbered on across the files.
void write_windows(const ScratchDir& dir, const std::vector<int>& counts) {
  int64_t k = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    std::vector<std::string> records;
    for (int r = 0; r < counts[i]; ++r) records.push_back(token_record(window(k++)));
    testing::write_tfrecord(dir.path("w-" + std::to_string(i) + ".tfrecord"), records);
  }
}

// `shuffle_buffer` is 0 unless `extra` gives it (a key may appear once in a mapping).
PipelineConfig token_config(const ScratchDir& dir, const std::string& extra = "") {
  std::string shuffle = extra.find("shuffle_buffer:") == std::string::npos ? "  shuffle_buffer: 0\n" : "";
  return parse_pipeline_config("data:\n  files: " + dir.path("w-*.tfrecord") + "\n" + shuffle +
                               "  cycle_length: 1\n  batch_size: 4\n"
                               "  drop_remainder: false\n" +
                               extra + "  tokens: {key: tokens, length: 5, vocab_size: 256}\n");
}

// The first token of every row of every batch: the windows, in the order they came.
std::vector<int64_t> window_ids(const Dataset& ds, int64_t epoch = 0) {
  std::vector<int64_t> ids;
  DatasetIterator it = ds.make_iterator(epoch);
  Element batch;
  while (it.next(&batch)) {
    const Tensor& t = batch.tensors.at(0);
    EXPECT_EQ(t.dtype(), DType::kI64);
    EXPECT_EQ(t.dim(1), kLength);
    for (int64_t r = 0; r < t.dim(0); ++r) ids.push_back(t.data<int64_t>()[r * kLength]);
  }
  return ids;
}

std::string pipeline_error(const PipelineConfig& config) {
  try {
    window_ids(build_replica_pipelines(config, 1, 0, -1, false).datasets.at(0));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

std::string config_error(const std::string& yaml) {
  try {
    parse_pipeline_config(yaml);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenPipeline, ConfigSection) {
  PipelineConfig c = parse_pipeline_config("data:\n  files: x\n  tokens:\n    length: 257\n    vocab_size: 256\n");
  ASSERT_TRUE(c.tokens.has_value());
  EXPECT_EQ(c.tokens->key, "tokens");
  EXPECT_EQ(c.tokens->length, 257);
  EXPECT_EQ(c.tokens->vocab_size, 256);
  EXPECT_FALSE(parse_pipeline_config("data:\n  files: x\n").tokens.has_value());  // images, as before

  std::string both = config_error("data:\n  files: x\n  image: {format: raw}\n  tokens: {length: 3, vocab_size: 9}\n");
  EXPECT_NE(both.find("data.image (line 3) and data.tokens (line 4)"), std::string::npos) << both;
  EXPECT_NE(both.find("not both"), std::string::npos) << both;
  EXPECT_NE(config_error("data:\n  files: x\n  tokens: {vocab_size: 256}\n").find("data.tokens.length: required"),
            std::string::npos);
  EXPECT_NE(config_error("data:\n  files: x\n  tokens: {length: 9}\n").find("data.tokens.vocab_size: required"),
            std::string::npos);
  std::string too_short = config_error("data:\n  files: x\n  tokens: {length: 1, vocab_size: 2}\n");
  EXPECT_NE(too_short.find("data.tokens.length (line 3): must be at least 2"), std::string::npos) << too_short;
  std::string typo = config_error("data:\n  files: x\n  tokens: {lenght: 9, vocab_size: 2}\n");
  EXPECT_NE(typo.find("did you mean 'length'"), std::string::npos) << typo;
}

TEST(TokenPipeline, BatchesHoldTheWindowsAsI64) {
  ScratchDir dir;
  write_windows(dir, {10, 6});
  PipelineConfig config = token_config(dir);
  ReplicaPipelines p = build_replica_pipelines(config, 1, 0, -1, false);
  std::unique_ptr<PipelineBatchSource> source = make_batch_source(config, p.datasets.at(0), true, p.budget);
  source->start_epoch(0);
  Batch batch;
  int64_t k = 0;
  while (source->next(batch)) {
    ASSERT_EQ(batch.tensors().size(), 1u) << batch.describe();
    const Tensor& t = batch.at(kTokensBatchName);
    ASSERT_EQ(t.shape(), Shape({4, kLength})) << batch.describe();
    ASSERT_EQ(t.dtype(), DType::kI64);
    for (int64_t r = 0; r < 4; ++r, ++k) {
      for (int64_t j = 0; j < kLength; ++j) EXPECT_EQ(t.data<int64_t>()[r * kLength + j], window(k)[j]);
    }
  }
  EXPECT_EQ(k, 16);  // every window once, in file order
}

TEST(TokenPipeline, AWindowOfAnotherLengthIsNamed) {
  ScratchDir dir;
  std::vector<std::string> records;
  for (int k = 0; k < 6; ++k) records.push_back(token_record(k == 3 ? std::vector<int64_t>{1, 2, 3, 4} : window(k)));
  testing::write_tfrecord(dir.path("w-0.tfrecord"), records);
  std::string msg = pipeline_error(token_config(dir));
  EXPECT_NE(msg.find(dir.path("w-0.tfrecord") + " record 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("holds 4 tokens but data.tokens.length is 5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--block-size 4"), std::string::npos) << msg;
}

TEST(TokenPipeline, ATokenOutsideTheVocabularyIsNamed) {
  ScratchDir dir;
  std::vector<std::string> records;
  for (int k = 0; k < 6; ++k) {
    records.push_back(token_record(k == 2 ? std::vector<int64_t>{1, 2, 300, 4, 5} : window(k)));
  }
  testing::write_tfrecord(dir.path("w-0.tfrecord"), records);
  std::string msg = pipeline_error(token_config(dir));
  EXPECT_NE(msg.find(dir.path("w-0.tfrecord") + " record 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("token 300 at position 2 (feature 'tokens') is outside [0, 256)"), std::string::npos) << msg;

  testing::write_tfrecord(dir.path("w-0.tfrecord"), {token_record({1, -1, 2, 3, 4})});
  EXPECT_NE(pipeline_error(token_config(dir)).find("token -1 at position 1"), std::string::npos);
  testing::write_tfrecord(dir.path("w-0.tfrecord"), {testing::image_example("xx", 1)});
  EXPECT_NE(pipeline_error(token_config(dir)).find("no feature 'tokens'"), std::string::npos);
}

TEST(TokenPipeline, ShuffleFollowsTheSeedAndTheEpoch) {
  ScratchDir dir;
  write_windows(dir, {40, 24});
  auto ids = [&](uint64_t seed, int64_t epoch) {
    PipelineConfig config = token_config(dir, "  shuffle_buffer: 100\n");
    config.seed = seed;
    return window_ids(build_replica_pipelines(config, 1, 0, -1, false).datasets.at(0), epoch);
  };
  std::vector<int64_t> a = ids(3, 0);
  EXPECT_EQ(a, ids(3, 0));
  EXPECT_NE(a, ids(4, 0));
  EXPECT_NE(a, ids(3, 1));  // reshuffled each epoch
  std::sort(a.begin(), a.end());
  std::vector<int64_t> all(64);
  for (int64_t k = 0; k < 64; ++k) all[static_cast<size_t>(k)] = k;
  EXPECT_EQ(a, all);
}

TEST(TokenPipeline, TwoReplicasReadDisjointWindows) {
  ScratchDir dir;
  write_windows(dir, {12, 12});
  for (const char* policy : {"data", "file"}) {
    PipelineConfig config = token_config(dir, std::string("  shard_policy: ") + policy + "\n");
    ReplicaPipelines p = build_replica_pipelines(config, 2, 0, -1, false);
    std::vector<int64_t> r0 = window_ids(p.datasets.at(0)), r1 = window_ids(p.datasets.at(1));
    EXPECT_EQ(r0.size(), 12u) << policy;
    EXPECT_EQ(r1.size(), 12u) << policy;
    std::set<int64_t> seen(r0.begin(), r0.end());
    seen.insert(r1.begin(), r1.end());
    EXPECT_EQ(seen.size(), 24u) << policy << ": the replicas' windows overlap or repeat";
  }
}

TEST(TokenPipeline, CachedEpochsAndTheResumePromise) {
  ScratchDir dir;
  write_windows(dir, {20, 12});
  PipelineConfig config = token_config(dir, "  shuffle_buffer: 32\n  cache: true\n  seed: 9\n");
  ReplicaPipelines p = build_replica_pipelines(config, 1, 0, -1, false);
  std::unique_ptr<PipelineBatchSource> source = make_batch_source(config, p.datasets.at(0), false, p.budget);
  Batch batch;
  auto pass = [&](int64_t epoch, std::vector<int64_t>* ids) {
    std::vector<uint32_t> prints;
    source->start_epoch(epoch);
    while (source->next(batch)) {
      prints.push_back(batch_fingerprint(batch));
      const Tensor& t = batch.at(kTokensBatchName);
      for (int64_t r = 0; r < t.dim(0); ++r) ids->push_back(t.data<int64_t>()[r * kLength]);
    }
    return prints;
  };
  std::vector<int64_t> first, second, again;
  std::vector<uint32_t> epoch1 = pass(1, &first);
  pass(2, &second);  // from the cache
  EXPECT_EQ(pass(1, &again), epoch1) << "epoch 1 twice must give the same batches";
  EXPECT_NE(first, second);
  std::sort(first.begin(), first.end());
  std::sort(second.begin(), second.end());
  EXPECT_EQ(first, second);
  EXPECT_EQ(first.size(), 32u);
}

}  // namespace
}  // namespace tandem::data
