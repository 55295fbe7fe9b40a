// precision: bf16 on CPU replicas: a run trains to the f32 run's result within bf16's reach; its
// checkpoints hold f32 master weights, so a bf16 run resumes in f32 and again in bf16 and trains on;
// and tf32, which CPUs do not have, is refused before anything runs.
#include <gtest/gtest.h>

#include "tests/train/trainer_fixture.h"
#include "tests/support/bf16_cpu.h"

namespace tandem::train {
namespace {

using namespace fixture;

TEST_F(TrainerTest, ABf16RunOnTheCpuLearnsAsTheF32RunDoes) {
  TANDEM_REQUIRE_BF16_CPU();
  TrainConfig c = base_config(dir_);
  c.loop.epochs = 6;
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); };
  auto eval = [&] {
    std::vector<std::unique_ptr<BatchSource>> e;
    e.push_back(std::make_unique<SliceSource>(data_, 0, 1, 8));
    return e;
  };
  TrainedRun f32 = train(c, 1, source, eval());
  c.precision = "bf16";
  c.checkpoint.dir = (dir_ / "bf16").string();
  TrainedRun bf16 = train(c, 1, source, eval());
  EXPECT_EQ(bf16.summary.steps, f32.summary.steps);
  EXPECT_GT(bf16.summary.final_metrics.at("eval_top1"), 0.9);
  EXPECT_NEAR(bf16.summary.final_metrics.at("train_loss"), f32.summary.final_metrics.at("train_loss"), 0.05);
  const double apart = max_relative_difference(f32, bf16);
  EXPECT_GT(apart, 0.0) << "the bf16 run gave the f32 run's weights";
  EXPECT_LT(apart, 0.05);
}

TEST_F(TrainerTest, ABf16RunResumesInF32AndAgainInBf16) {
  TANDEM_REQUIRE_BF16_CPU();
  TrainConfig c = base_config(dir_);
  c.loop.epochs = 3;  // 24 steps
  c.precision = "bf16";
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); };
  TrainedRun straight = train(c, 1, source);

  TrainConfig in_f32 = interrupted_at(c, 8, "switch", source);  // bf16 to step 8
  in_f32.precision = "fp32";
  in_f32.loop.steps = 16;
  in_f32.checkpoint.every_steps = 16;
  TrainedRun middle = train(in_f32, 1, source);  // f32 from 8 to 16
  EXPECT_EQ(middle.summary.steps, 16);
  TrainConfig back = in_f32;
  back.precision = "bf16";
  back.loop.steps = 0;  // to the end of the epochs
  TrainedRun resumed = train(back, 1, source);  // bf16 from 16 to 24
  EXPECT_EQ(resumed.summary.steps, straight.summary.steps);
  EXPECT_LT(resumed.summary.final_metrics.at("train_loss"), 1.0);
  EXPECT_LT(max_relative_difference(straight, resumed), 0.05);
}

// distribute.allreduce_dtype: bf16: two replicas reduce their gradients in bf16, stay bitwise equal
// (train() checks every replica's weights), and end close to the f32 reduction's run, not on it.
TEST_F(TrainerTest, TwoReplicasAllReducingInBf16TrainAsInF32) {
  TrainConfig c = base_config(dir_);
  c.loop.epochs = 4;
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 2, 4); };
  TrainedRun f32 = train(c, 2, source);
  c.distribute.allreduce_dtype = "bf16";
  c.checkpoint.dir = (dir_ / "bf16-wire").string();
  TrainedRun bf16 = train(c, 2, source);
  EXPECT_EQ(bf16.summary.steps, f32.summary.steps);
  EXPECT_NEAR(bf16.summary.final_metrics.at("train_loss"), f32.summary.final_metrics.at("train_loss"), 0.05);
  const double apart = max_relative_difference(f32, bf16);
  EXPECT_GT(apart, 0.0) << "the gradients were not rounded to bf16";
  EXPECT_LT(apart, 0.05);
}

TEST_F(TrainerTest, Tf32OnTheCpuIsRefusedNamingWhatRunsThere) {
  TrainConfig c = base_config(dir_);
  c.precision = "tf32";
  try {
    train(c, 1, [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); });
    FAIL() << "tf32 on the CPU ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("precision: fp32 or bf16 on the CPU"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::train
