// `trainer doctor --config`'s checks: the shard advice on synthetic sizes, the storage probes on
// the real /tmp, a plan error (a global batch that does not divide) surfacing as a cause and a
// "not ready" verdict, and the process group a launcher's variables describe.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/train/config.h"
#include "tools/trainer/doctor_config.h"

namespace tandem::tools {
namespace {

using ::testing::HasSubstr;

std::vector<data::ShardFile> shards(int n, uint64_t bytes) {
  std::vector<data::ShardFile> out;
  for (int i = 0; i < n; ++i) out.push_back({"/d/train-" + std::to_string(i) + ".tfrecord", bytes, -1});
  return out;
}

TEST(DoctorConfigTest, EnoughShardsOfAdvisedSizeAreFine) {
  EXPECT_TRUE(check_data_layout(shards(16, 200'000'000), 8, 2).empty());
  EXPECT_TRUE(check_data_layout({}, 8, 2).empty());
}

TEST(DoctorConfigTest, TooFewShardsForCoresTimesGpus) {
  auto causes = check_data_layout(shards(4, 200'000'000), 4, 2);
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_EQ(causes[0].severity, backend::Severity::kWarning);
  EXPECT_THAT(causes[0].summary, HasSubstr("4 TFRecord files for 4 cores x 2 GPUs"));
  EXPECT_THAT(causes[0].summary, HasSubstr("at least 8 shards"));
  EXPECT_THAT(causes[0].fix, HasSubstr("trainer convert --shard-size 100MB"));
  // No GPU counts as one: the cores alone set the count.
  EXPECT_THAT(check_data_layout(shards(2, 200'000'000), 4, 0)[0].summary, HasSubstr("at least 4 shards"));
}

TEST(DoctorConfigTest, NamesShardsOutsideTheAdvisedSizes) {
  auto files = shards(8, 200'000'000);
  files[1].bytes = 23'500'000;
  files[5].bytes = 900'000'000;
  auto causes = check_data_layout(files, 2, 1);
  ASSERT_EQ(causes.size(), 2u);
  EXPECT_THAT(causes[0].summary, HasSubstr("1 of 8 shards under 100 MB: train-1.tfrecord (23.5 MB)"));
  EXPECT_THAT(causes[0].fix, HasSubstr("trainer convert --shard-size"));
  EXPECT_THAT(causes[1].summary, HasSubstr("1 of 8 shards over 500 MB: train-5.tfrecord (900.0 MB)"));
  EXPECT_THAT(causes[1].fix, HasSubstr("trainer convert --shard-size"));
}

TEST(DoctorConfigTest, ListsAFewSmallShardsThenCounts) {
  auto causes = check_data_layout(shards(6, 1'000'000), 1, 1);
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_THAT(causes[0].summary, HasSubstr("6 of 6 shards under 100 MB"));
  EXPECT_THAT(causes[0].summary, HasSubstr("and 2 more"));
}

TEST(DoctorConfigTest, ProbesTheRealTmpWithoutThrowing) {
  StorageInfo info;
  ASSERT_NO_THROW(info = probe_storage("/tmp"));
  EXPECT_FALSE(info.filesystem.empty());
  EXPECT_FALSE(info.detail.empty());  // the answer, or why there is none
  EXPECT_NO_THROW(check_storage(info, "/tmp"));
  StorageInfo missing = probe_storage("/no/such/folder");
  EXPECT_FALSE(missing.rotational.has_value());
  EXPECT_THAT(missing.detail, HasSubstr("failed"));
}

TEST(DoctorConfigTest, WarnsForNetworkAndRotationalStorage) {
  StorageInfo nfs{std::nullopt, true, "nfs", "nfs"};
  auto causes = check_storage(nfs, "/mnt/data");
  ASSERT_EQ(causes.size(), 1u);
  EXPECT_THAT(causes[0].summary, HasSubstr("network file system (nfs)"));
  EXPECT_THAT(causes[0].fix, HasSubstr("local SSD"));
  EXPECT_THAT(causes[0].fix, HasSubstr("cache: true"));
  StorageInfo disk{true, false, "ext2/3/4", "sda"};
  EXPECT_THAT(check_storage(disk, "/data")[0].summary, HasSubstr("rotational disk"));
  StorageInfo ssd{false, false, "ext2/3/4", "nvme0n1"};
  EXPECT_TRUE(check_storage(ssd, "/data").empty());
}

// The plan function of the trainer with the doctor left out: the CPU only.
distribute::ReplicaPlan cpu_plan(const train::TrainConfig& c, const distribute::ProcessGroupSpec& p) {
  distribute::ReplicaPlanRequest request = train::plan_request(c);
  request.processes = p.size;
  request.process_rank = p.rank;
  return distribute::plan_replicas(request);
}

TEST(DoctorConfigTest, BatchThatDoesNotDivideIsNotReady) {
  train::TrainConfig config;
  config.device.device = "cpu";
  config.device.devices = "cpu:4";
  config.loop.global_batch_size = 130;
  ConfigCheck check = check_config("run.yaml", config, {"/no/such/train-*.tfrecord"}, 4, 0, cpu_plan);
  ASSERT_FALSE(check.plan.ok);
  EXPECT_TRUE(check.plan.not_ready);
  ASSERT_FALSE(check.causes.empty());
  EXPECT_EQ(check.causes[0].severity, backend::Severity::kError);
  EXPECT_THAT(check.causes[0].summary, HasSubstr("130"));
  backend::DoctorReport report;
  report.verdict = backend::Verdict::kReadyCpuOnly;
  apply_to_verdict(check, report);
  EXPECT_EQ(report.exit_code(), 1);
  EXPECT_THAT(report.verdict_line, HasSubstr("not ready: "));
  EXPECT_THAT(render_config_text(check), HasSubstr("cannot start"));
  nlohmann::json doc = nlohmann::json::parse(render_json_with_config(report, check));
  EXPECT_EQ(doc["config"]["path"], "run.yaml");
  EXPECT_EQ(doc["config"]["ok"], false);
  EXPECT_EQ(doc["exit_code"], 1);
}

TEST(DoctorConfigTest, CudaWithoutAGpuIsNotReady) {
  train::TrainConfig config;
  config.device.device = "cuda";
  config.loop.global_batch_size = 128;
  PlanCheck check = check_plan(config, cpu_plan);  // sees no GPU
  EXPECT_TRUE(check.not_ready);
  ASSERT_EQ(check.causes.size(), 1u);
  EXPECT_THAT(check.causes[0].summary, HasSubstr("device: cuda, but no usable GPU"));
  EXPECT_THAT(check.causes[0].fix, HasSubstr("device: cpu"));
}

TEST(DoctorConfigTest, PlanThatFitsIsDescribed) {
  train::TrainConfig config;
  config.device.device = "cpu";
  config.device.devices = "cpu:2";
  config.loop.global_batch_size = 128;
  ConfigCheck check = check_config("run.yaml", config, {"/no/such/*.tfrecord"}, 2, 0, cpu_plan);
  ASSERT_TRUE(check.plan.ok);
  EXPECT_EQ(check.plan.plan.per_replica_batch_size, 64);
  EXPECT_THAT(render_config_text(check), HasSubstr("2 replicas on cpu"));
  EXPECT_THAT(render_config_text(check), HasSubstr("per-replica batch 64, global batch 128"));
}

}  // namespace
}  // namespace tandem::tools

namespace tandem::tools {
namespace {

distribute::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

train::TrainConfig cpu_config() {
  train::TrainConfig config;
  config.device.device = "cpu";
  config.device.devices = "cpu:2";
  config.loop.global_batch_size = 128;
  return config;
}

TEST(DoctorConfigTest, ALaunchersProcessesShowAndTheBatchIsOverEveryReplica) {
  auto env = env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29555"}});
  ConfigCheck check = check_config("run.yaml", cpu_config(), {"/no/such/*.tfrecord"}, 2, 0, cpu_plan, env);
  ASSERT_TRUE(check.processes.ok) << (check.causes.empty() ? "" : check.causes.front().summary);
  EXPECT_EQ(check.processes.route, "127.0.0.1");
  ASSERT_TRUE(check.plan.ok);
  EXPECT_EQ(check.plan.plan.replicas(), 4);
  EXPECT_EQ(check.plan.plan.per_replica_batch_size, 32);
  const std::string text = render_config_text(check);
  EXPECT_NE(text.find("processes: process 1 of 2 (from environment (RANK, WORLD_SIZE)), rendezvous at "
                      "127.0.0.1:29555 (this host reaches it from 127.0.0.1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("4 replicas (2 processes x 2)"), std::string::npos) << text;
}

TEST(DoctorConfigTest, ABadLauncherVariableMakesItNotReady) {
  ConfigCheck check = check_config("run.yaml", cpu_config(), {"/no/such/*.tfrecord"}, 2, 0, cpu_plan,
                                   env_of({{"RANK", "3"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}}));
  EXPECT_FALSE(check.processes.ok);
  ASSERT_FALSE(check.causes.empty());
  EXPECT_NE(check.causes.front().summary.find("not below the process count 2"), std::string::npos);
  backend::DoctorReport report;
  report.verdict = backend::Verdict::kReadyCpuOnly;
  apply_to_verdict(check, report);
  EXPECT_EQ(report.verdict, backend::Verdict::kNotReady);
  EXPECT_NE(report.verdict_line.find("not below the process count"), std::string::npos) << report.verdict_line;
}

TEST(DoctorConfigTest, DataFilesThatMatchNothingAreNotReadyUnlessPrepared) {
  ConfigCheck check = check_config("run.yaml", cpu_config(), {"/no/such/*.tfrecord"}, 2, 0, cpu_plan);
  ASSERT_TRUE(check.missing_data.has_value());
  backend::DoctorReport report;
  report.verdict = backend::Verdict::kReadyCpuOnly;
  apply_to_verdict(check, report);
  EXPECT_EQ(report.verdict, backend::Verdict::kNotReady);
  EXPECT_THAT(report.verdict_line, HasSubstr("/no/such/*.tfrecord")) << report.verdict_line;

  train::TrainConfig prepared = cpu_config();
  prepared.prepare.source = "fashion-mnist";  // the trainer makes the files at start
  check = check_config("run.yaml", prepared, {"/no/such/*.tfrecord"}, 2, 0, cpu_plan);
  EXPECT_FALSE(check.missing_data.has_value());
  report.verdict = backend::Verdict::kReadyCpuOnly;
  apply_to_verdict(check, report);
  EXPECT_EQ(report.verdict, backend::Verdict::kReadyCpuOnly);
}

}  // namespace
}  // namespace tandem::tools
