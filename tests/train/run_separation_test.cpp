// Runs never mix: checkpoints carry their run's id, keep_last prunes only its own run's, a fresh
// run refuses a checkpoint directory another run wrote, and a resumed run trusts no data position
// that cannot be true. Also the last, partial batch (data.drop_remainder: false) under gradient
// accumulation.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "engine/train/checkpoint/checkpoint.h"
#include "tests/train/checkpoint_util.h"
#include "tests/train/trainer_fixture.h"

namespace tandem::train {
namespace {

using namespace fixture;

optim::OptimizerOptions sgd() { return {.name = "sgd", .lr = 0.05f, .momentum = 0.9f}; }

CheckpointMeta meta_at(int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.replicas = {{{{"epoch", 0}, {"batches", step}}, {1, 2, 3}}};
  m.config = "model: mlp\n";
  return m;
}

std::vector<std::string> step_names(const CheckpointManager& manager) {
  std::vector<std::string> out;
  for (const auto& p : manager.complete_checkpoints()) out.push_back(p.filename().string());
  return out;
}

std::string error_of(const std::function<void()>& f, ErrorCode code) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(RunSeparation, KeepLastPrunesOnlyItsOwnRunsCheckpoints) {
  testing::TempDir dir;
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), sgd());
  CheckpointManager a(dir.path(), 2);
  a.set_run_id("run-a");
  for (int step : {100, 200, 300}) a.save(*model, *optimizer, meta_at(step));
  EXPECT_EQ(validate_checkpoint(dir / "step-00000300").run_id, "run-a");
  // Before run ids, run b's step 50 was the oldest and went at its own next save.
  CheckpointManager b(dir.path(), 1);
  b.set_run_id("run-b");
  b.save(*model, *optimizer, meta_at(50));
  b.save(*model, *optimizer, meta_at(60));
  EXPECT_EQ(step_names(b), (std::vector<std::string>{"step-00000060", "step-00000200", "step-00000300"}));
}

TEST(RunSeparation, CheckOneRunNamesTheOtherRun) {
  testing::TempDir dir;
  auto model = testing::small_model(1);
  auto optimizer = optim::make_optimizer(model->named_parameters(), sgd());
  CheckpointManager manager(dir.path(), 0);
  check_one_run(manager, std::nullopt);  // empty: a fresh run may start
  manager.set_run_id("run-a");
  manager.save(*model, *optimizer, meta_at(100));
  check_one_run(manager, std::string("run-a"));  // its own run resumes
  std::string e = error_of([&] { check_one_run(manager, std::nullopt); }, ErrorCode::kFailedPrecondition);
  EXPECT_NE(e.find("holds checkpoints of run run-a (newest step-00000100)"), std::string::npos) << e;
  EXPECT_NE(e.find("this run starts fresh"), std::string::npos) << e;
  EXPECT_NE(e.find("checkpoint.resume: auto"), std::string::npos) << e;
  e = error_of([&] { check_one_run(manager, std::string("run-b")); }, ErrorCode::kFailedPrecondition);
  EXPECT_NE(e.find("resumes run run-b"), std::string::npos) << e;
}

// The case: a fresh run in a used run directory had its own checkpoint pruned by keep_last
// in favour of the older run's, and resume: auto then continued the older run.
TEST_F(TrainerTest, AFreshRunRefusesACheckpointDirectoryOfAnotherRun) {
  TrainConfig c = base_config(dir_);
  c.loop.steps = 6;
  c.checkpoint.every_steps = 3;
  c.checkpoint.keep_last = 1;
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); };
  train(c, 1, source);
  const std::string older = validate_checkpoint(std::filesystem::path(c.checkpoint.dir) / "step-00000006").run_id;
  EXPECT_EQ(older.size(), 32u);
  TrainConfig fresh = c;
  fresh.loop.steps = 3;
  const std::string e = error_of([&] { train(fresh, 1, source); }, ErrorCode::kFailedPrecondition);
  EXPECT_NE(e.find("holds checkpoints of run " + older), std::string::npos) << e;
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(c.checkpoint.dir) / "step-00000006"));

  // Resuming that run goes on under its id; a new run id for a fresh directory.
  TrainConfig resumed = c;
  resumed.loop.steps = 9;
  resumed.checkpoint.resume = "auto";
  train(resumed, 1, source);
  EXPECT_EQ(validate_checkpoint(std::filesystem::path(c.checkpoint.dir) / "step-00000009").run_id, older);
  TrainConfig elsewhere = c;
  elsewhere.checkpoint.dir = (dir_ / "elsewhere").string();
  train(elsewhere, 1, source);
  EXPECT_NE(validate_checkpoint(std::filesystem::path(elsewhere.checkpoint.dir) / "step-00000006").run_id, older);
}

// A checkpoint from before run ids: the run resumed from it adopts a new id and saves beside it, and
// must resume again from its own newest (the old checkpoint is not another run's).
TEST_F(TrainerTest, ARunFromBeforeRunIdsResumesAgainAndAgain) {
  TrainConfig c = base_config(dir_);
  c.loop.steps = 3;
  c.checkpoint.every_steps = 3;
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); };
  train(c, 1, source);
  const std::filesystem::path meta = std::filesystem::path(c.checkpoint.dir) / "step-00000003" / "meta.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(meta));
  j.erase("run_id");
  std::ofstream(meta) << j.dump(2);
  ASSERT_EQ(validate_checkpoint(meta.parent_path()).run_id, "");
  c.checkpoint.resume = "auto";
  for (int64_t steps : {6, 9}) {
    c.loop.steps = steps;
    EXPECT_EQ(train(c, 1, source).summary.steps, steps);
  }
  // A fresh run still refuses the folder, old checkpoint and all.
  c.checkpoint.resume = "none";
  EXPECT_THROW(train(c, 1, source), Error);
}

// A meta.json whose data position was edited (10^15 batches, -7) used to resume and train other data.
TEST_F(TrainerTest, ResumeRefusesADataPositionThatCannotBeTrue) {
  TrainConfig c = base_config(dir_);
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); };
  TrainConfig resume = interrupted_at(c, 5, "resume", source);
  const std::filesystem::path meta_path = std::filesystem::path(resume.checkpoint.dir) / "step-00000005" / "meta.json";
  nlohmann::json original = nlohmann::json::parse(std::ifstream(meta_path));
  for (const nlohmann::json& bad : {nlohmann::json(int64_t{1000000000000000}), nlohmann::json(-7),
                                    nlohmann::json("3")}) {
    nlohmann::json edited = original;
    edited["replicas"][0]["data_position"]["batches"] = bad;
    std::ofstream(meta_path) << edited.dump(2);
    TrainerSetup setup;
    setup.config = resume;
    setup.plan = distribute::plan_replicas({.device = "cpu", .devices = "cpu:1", .global_batch_size = 8, .cores = 1});
    setup.make_model = [&] { return models::create_model(resume.model); };
    setup.train_sources.push_back(source(0));
    setup.run_dir = resume.output.run_dir;
    setup.steps_per_epoch = 8;
    const std::string e = error_of([&] { Trainer trainer(std::move(setup)); }, ErrorCode::kDataLoss);
    EXPECT_NE(e.find("data_position"), std::string::npos) << bad.dump() << ": " << e;
  }
  std::ofstream(meta_path) << original.dump(2);
  train(resume, 1, source);  // the true position resumes
}

// Another global batch on resume (same replica count) continues from the same global position; it
// used to take the saved batch count in the new batch's units and blame the data source for the
// batch it found there ("batch source gives another batch").
TEST_F(TrainerTest, ResumeWithAnotherGlobalBatchContinuesFromTheSameExamples) {
  TrainConfig c = base_config(dir_);
  TrainConfig resume = interrupted_at(c, 5, "resume", [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); });
  resume.loop.global_batch_size = 4;
  TrainedRun run = train(resume, 1, [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 4); });
  // 40 of epoch 1's 64 examples were trained in 5 steps of 8: 6 steps of 4 finish it, 16 make epoch 2.
  EXPECT_EQ(run.summary.steps, 5 + 6 + 16);
}

// A source whose epoch is two full batches and then `last` examples: data.drop_remainder: false.
class PartialLastBatch : public BatchSource {
 public:
  PartialLastBatch(const Dataset& data, int64_t full = 8, int64_t last = 3, int64_t offset = 0)
      : data_(data), sizes_{full, full, last}, offset_(offset) {}
  void start_epoch(int64_t) override { k_ = 0; }
  bool next(Batch& batch) override {
    if (k_ == 3) return false;
    const int64_t n = sizes_[k_], first = offset_ + sizes_[0] * k_;
    Tensor x = Tensor::empty({n, 1, 6, 6});
    Tensor labels = Tensor::empty({n}, DType::kI64);
    std::copy_n(data_.x.data<float>() + first * 36, n * 36, x.data<float>());
    std::copy_n(data_.labels.data<int64_t>() + first, n, labels.data<int64_t>());
    batch.set(kImage, x);
    batch.set(kLabel, labels);
    ++k_;
    return true;
  }

 private:
  const Dataset& data_;
  int64_t sizes_[3];
  int64_t offset_;
  int64_t k_ = 0;
};

// 4 micro-batches of a 3-row batch were 0 rows each (the run died at the epoch's end without a
// checkpoint); now each row is one micro-batch, and every step, the partial one too, trains.
TEST_F(TrainerTest, GradientAccumulationTrainsAPartialLastBatch) {
  TrainConfig c = base_config(dir_);
  c.loop.grad_accumulation_steps = 4;
  c.loop.epochs = 2;
  TrainedRun run = train(c, 1, [&](int) { return std::make_unique<PartialLastBatch>(data_); });
  EXPECT_EQ(run.summary.steps, 6);
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(c.checkpoint.dir) / "step-00000006"));
  for (const auto& [name, w] : run.weights) {
    for (float v : w) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

// Replicas whose last batches differ (3 rows and 2) agree on one micro-batch count: with
// SyncBatchNorm every micro-batch's forward and backward are collectives, which must pair up.
TEST_F(TrainerTest, ReplicasAgreeOnTheMicroBatchesOfUnevenPartialBatches) {
  TrainConfig c = base_config(dir_);
  c.model.name = "small_cnn";
  c.distribute.sync_batchnorm = true;
  c.distribute.watchdog_timeout_s = 10;
  c.loop.grad_accumulation_steps = 4;
  c.loop.epochs = 1;
  TrainedRun run = train(c, 2, [&](int r) { return std::make_unique<PartialLastBatch>(data_, 4, 3 - r, 16 * r); });
  EXPECT_EQ(run.summary.steps, 3);
}

}  // namespace
}  // namespace tandem::train
