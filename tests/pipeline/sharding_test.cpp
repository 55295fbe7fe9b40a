// Per-replica sharding: every record exactly once across replicas for each policy, also with
// fewer files than replicas and with very uneven files; auto's choices and the plan log.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "data/pipeline/replica_pipeline.h"
#include "data/pipeline/sharding.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace tandem::data {
namespace {

PipelineConfig raw_config(const std::string& pattern, ShardPolicy policy) {
  PipelineConfig c;
  c.files = {pattern};
  c.shard_policy = policy;
  c.image.format = ImageFormat::kRaw;
  c.image.raw_shape = {2, 2, 1};
  c.image.augment.height = 0;
  c.image.augment.width = 0;
  c.image.augment.channels = 1;
  c.image.augment.random_resized_crop = false;
  c.image.augment.horizontal_flip = false;
  c.batch_size = 3;
  c.drop_remainder = false;
  c.shuffle_buffer = 16;
  c.seed = 5;
  c.num_parallel_calls = 2;
  return c;
}

// Labels each replica reads in one epoch, and how often each label was read in total.
std::map<int64_t, int> read_all(const PipelineConfig& config, int replicas, ShardPlan* plan) {
  ReplicaPipelines pipes = build_replica_pipelines(config, replicas);
  *plan = pipes.plan;
  std::map<int64_t, int> seen;
  for (int r = 0; r < replicas; ++r) {
    std::vector<int64_t> labels = testing::labels_of(pipes.datasets[static_cast<size_t>(r)]);
    auto expected = pipes.plan.replicas[static_cast<size_t>(r)].expected_records;
    EXPECT_EQ(static_cast<int64_t>(labels.size()), expected) << "replica " << r;
    for (int64_t l : labels) ++seen[l];
  }
  return seen;
}

void expect_each_once(const std::map<int64_t, int>& seen, int64_t total) {
  ASSERT_EQ(static_cast<int64_t>(seen.size()), total);
  for (const auto& [label, count] : seen) EXPECT_EQ(count, 1) << "label " << label;
}

struct Case {
  std::vector<int> counts;
  int replicas;
  ShardPolicy policy;
  ShardPolicy resolved;
};

TEST(PipelineSharding, EveryRecordExactlyOnce) {
  const std::vector<Case> cases{
      {{10, 10, 10, 10}, 2, ShardPolicy::kFile, ShardPolicy::kFile},
      {{10, 10, 10, 10}, 4, ShardPolicy::kAuto, ShardPolicy::kFile},
      {{7, 9, 11}, 3, ShardPolicy::kData, ShardPolicy::kData},
      {{25, 20}, 4, ShardPolicy::kAuto, ShardPolicy::kData},        // files < replicas
      {{60, 1, 1, 1}, 2, ShardPolicy::kAuto, ShardPolicy::kData},   // very uneven files
      {{3}, 5, ShardPolicy::kAuto, ShardPolicy::kData},             // fewer records than... almost
  };
  int n = 0;
  for (const Case& c : cases) {
    testing::ScratchDir dir;
    testing::write_labelled_files(dir.path("part"), c.counts);
    ShardPlan plan;
    auto seen = read_all(raw_config(dir.path("part-*.tfrecord"), c.policy), c.replicas, &plan);
    SCOPED_TRACE("case " + std::to_string(n++));
    EXPECT_EQ(plan.resolved, c.resolved) << plan.reason;
    int total = 0;
    for (int k : c.counts) total += k;
    expect_each_once(seen, total);
  }
}

TEST(PipelineSharding, OffGivesEveryReplicaEverything) {
  testing::ScratchDir dir;
  testing::write_labelled_files(dir.path("part"), {5, 6});
  ShardPlan plan;
  auto seen = read_all(raw_config(dir.path("part-*.tfrecord"), ShardPolicy::kOff), 3, &plan);
  ASSERT_EQ(seen.size(), 11u);
  for (const auto& [label, count] : seen) EXPECT_EQ(count, 3);
}

TEST(PipelineSharding, FilePolicyWithTooFewFilesIsAnErrorButAutoIsNot) {
  std::vector<ShardFile> files{{"a", 100, 10}, {"b", 100, 10}};
  EXPECT_THROW(plan_shards(files, 4, ShardPolicy::kFile), Error);
  ShardPlan plan = plan_shards(files, 4, ShardPolicy::kAuto);
  EXPECT_EQ(plan.resolved, ShardPolicy::kData);
  EXPECT_NE(plan.reason.find("2 files < 4 replicas"), std::string::npos) << plan.reason;
}

TEST(PipelineSharding, AutoBalanceUsesRecordsElseBytes) {
  // Balanced by bytes (records not counted): by file.
  std::vector<ShardFile> even{{"a", 100, -1}, {"b", 95, -1}, {"c", 100, -1}, {"d", 98, -1}};
  EXPECT_EQ(plan_shards(even, 2, ShardPolicy::kAuto).resolved, ShardPolicy::kFile);
  // Five equal files on four replicas: replica 0 would hold twice the others.
  std::vector<ShardFile> five(5, ShardFile{"x", 100, 10});
  EXPECT_EQ(plan_shards(five, 4, ShardPolicy::kAuto).resolved, ShardPolicy::kData);
}

TEST(PipelineSharding, PlanLogNamesFilesAndRecords) {
  std::vector<ShardFile> files{{"/d/a.tfrecord", 10, 4}, {"/d/b.tfrecord", 10, 4}, {"/d/c.tfrecord", 10, 4},
                               {"/d/e.tfrecord", 10, 4}};
  std::vector<std::string> lines = plan_shards(files, 2, ShardPolicy::kAuto).describe();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("policy auto -> file"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1], "  replica 0: 2 files [a.tfrecord, c.tfrecord]; 8 records");
  lines = plan_shards(files, 3, ShardPolicy::kData).describe();
  EXPECT_EQ(lines[2], "  replica 1: all 4 files, records i % 3 == 1; 5 records");
}

TEST(PipelineSharding, CountsRecordsOfAFile) {
  testing::ScratchDir dir;
  auto files = testing::write_labelled_files(dir.path("p"), {13, 0});
  EXPECT_EQ(count_records(files[0]), 13);
  EXPECT_EQ(count_records(files[1]), 0);
  EXPECT_THROW(parse_shard_policy("flie"), Error);
}

TEST(PipelineSharding, ACorruptFileIsItsDataLossNotTooFewRecords) {
  testing::ScratchDir dir;
  auto files = testing::write_labelled_files(dir.path("p"), {5});
  // The last record's data CRC cut short.
  std::filesystem::resize_file(files[0], std::filesystem::file_size(files[0]) - 3);
  EXPECT_EQ(count_records(files[0]), 4);  // skip / quarantine: the records before the damage
  try {
    count_records(files[0], true);
    FAIL() << "counted a damaged file under on_corrupt: fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("truncated record at"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(record 4)"), std::string::npos) << e.what();
  }
  // Planning a run: the file's damage, not "replica 0 gets 4 record(s) ... add records".
  PipelineConfig config = raw_config(files[0], ShardPolicy::kAuto);
  EXPECT_THROW(build_replica_pipelines(config, 1, 0, 1, false), Error);
  config.on_corrupt = OnCorrupt::kSkip;
  EXPECT_EQ(build_replica_pipelines(config, 1, 0, 1, false).plan.replicas[0].expected_records, 4);
}

}  // namespace
}  // namespace tandem::data
