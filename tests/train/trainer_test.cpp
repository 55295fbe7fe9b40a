// The training loop on CPU replicas with an in-memory source: learning, equivalence of 1, 2 and
// 4 replicas, determinism, exact resume, uneven shards, and failures that stop every replica.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <thread>

#include "engine/train/checkpoint/checkpoint.h"
#include "engine/train/checkpoint/safetensors.h"
#include "tests/train/trainer_fixture.h"

namespace tandem::train {
namespace {

using namespace fixture;

TEST_F(TrainerTest, LearnsAndReportsTheRun) {
  TrainConfig c = base_config(dir_);
  c.loop.epochs = 6;
  std::vector<std::unique_ptr<BatchSource>> eval;
  eval.push_back(std::make_unique<SliceSource>(data_, 0, 1, 8));
  TrainedRun run = train(c, 1, [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); }, std::move(eval));
  EXPECT_EQ(run.summary.steps, 48);
  EXPECT_EQ(run.summary.epochs, 6);
  EXPECT_GT(run.summary.images_per_sec, 0);
  EXPECT_GT(run.summary.wall_time_s, 0);  // a program calling Trainer::run() once read 0
  EXPECT_GT(run.summary.step_time_p95_ms, 0);
  EXPECT_GE(run.summary.step_time_p95_ms, run.summary.step_time_p50_ms);
  EXPECT_GT(run.summary.final_metrics.at("eval_top1"), 0.9);
  EXPECT_LT(run.summary.final_metrics.at("train_loss"), 0.5);
  EXPECT_EQ(run.summary.global_batch_size, 8);
  EXPECT_EQ(run.summary.per_replica_batch_size, 8);
  EXPECT_EQ(run.summary.device, "cpu");
}

// One replica reduces nothing: no gradient buckets are packed or waited for (a single GPU makes
// no NCCL communicator either), so the step's all-reduce time is exactly zero.
TEST_F(TrainerTest, OneReplicaHasNoAllReduce) {
  TrainConfig c = base_config(dir_);
  c.loop.steps = 6;
  c.loop.warmup_steps_for_timing = 0;
  TrainedRun one = train(c, 1, [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); });
  EXPECT_EQ(one.summary.breakdown.all_reduce, 0.0);
  EXPECT_GT(one.summary.breakdown.backward, 0.0);
  TrainedRun two = train(own_dir(c, "two"), 2, [&](int r) { return std::make_unique<SliceSource>(data_, r, 2, 4); });
  EXPECT_GT(two.summary.breakdown.all_reduce, 0.0) << "two replicas wait for their buckets";
}

TEST_F(TrainerTest, TwoAndFourReplicasMatchOneWithTheSameGlobalBatch) {
  TrainConfig c = base_config(dir_);
  c.loop.steps = 20;
  c.loop.epochs = 1;
  c.distribute.checksum_every_steps = 1;  // replicas bitwise equal after every step
  TrainedRun one = train(c, 1, [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); });
  for (int replicas : {2, 4}) {
    TrainedRun many = train(own_dir(c, fmt::format("replicas-{}", replicas)), replicas,
                            [&](int r) { return std::make_unique<SliceSource>(data_, r, replicas, 8 / replicas); });
    EXPECT_EQ(many.summary.steps, 20);
    for (auto& [name, w] : one.weights) {
      const auto& v = many.weights[name];
      ASSERT_EQ(v.size(), w.size());
      for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(v[i], w[i], 1e-5 * (1 + std::fabs(w[i]))) << name << "[" << i << "]";
    }
  }
}

TEST_F(TrainerTest, DeterministicRunsAreBitwiseEqual) {
  TrainConfig c = base_config(dir_);
  c.deterministic = true;
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 2, 4); };
  TrainedRun a = train(c, 2, source);
  TrainedRun b = train(own_dir(c, "b"), 2, source);
  EXPECT_EQ(a.weights, b.weights);
}

TEST_F(TrainerTest, ResumeMidEpochEndsWithBitwiseTheSameWeights) {
  TrainConfig c = base_config(dir_);
  c.deterministic = true;
  c.loop.epochs = 3;
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); };
  TrainedRun straight = train(c, 1, source);

  // Stop after 13 steps (mid-epoch 2), with a checkpoint at step 13, then resume to the end.
  TrainedRun resumed = train(interrupted_at(c, 13, "resume", source), 1, source);
  EXPECT_EQ(resumed.summary.steps, straight.summary.steps);
  EXPECT_EQ(resumed.weights, straight.weights);
}

// The first log row after a resume averages the same steps as the uninterrupted run's (13..16
// here, the checkpoint at 13 carrying step 13's sums), not only the steps since the resume.
TEST_F(TrainerTest, TheFirstLogRowAfterAResumeAveragesTheWholeInterval) {
  TrainConfig c = base_config(dir_);
  c.deterministic = true;
  c.loop.epochs = 3;
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); };
  auto losses = std::make_shared<std::map<int64_t, double>>();
  auto record = [losses] {
    return std::make_shared<OnStepEnd>([losses](const StepReport& r, TrainerControl&) {
      if (r.has_metrics) (*losses)[r.step] = r.loss;
    });
  };
  train(c, 1, source, {}, nullptr, {record()});
  const std::map<int64_t, double> straight = *losses;
  ASSERT_TRUE(straight.contains(16));

  losses->clear();
  train(interrupted_at(c, 13, "interval", source), 1, source, {}, nullptr, {record()});
  ASSERT_TRUE(losses->contains(16));
  EXPECT_EQ(losses->at(16), straight.at(16));  // bitwise: the same sums in the same order
  EXPECT_EQ(losses->at(20), straight.at(20));
}

// checkpoint.resume: PATH loads exactly that directory into a fresh checkpoint folder (the run's own
// checkpoint of the same step used to load instead, silently); into a folder that holds another
// run's checkpoint of that step it is refused, since its saves would replace that run's.
TEST_F(TrainerTest, ResumeFromAPathLoadsThatCheckpointNotTheRunsOwnOfTheSameStep) {
  TrainConfig c = base_config(dir_);
  c.deterministic = true;
  c.loop.epochs = 3;
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); };
  TrainedRun straight = train(c, 1, source);

  TrainConfig first = c;
  first.loop.steps = 13;
  first.checkpoint.every_steps = 13;
  first.checkpoint.dir = (dir_ / "first").string();
  train(first, 1, source);
  TrainConfig other = first;  // another run with a step-13 checkpoint of its own
  other.seed = 77;
  other.optimizer.lr = 0.05f;
  other.checkpoint.dir = (dir_ / "other").string();
  train(other, 1, source);
  const std::string path = (std::filesystem::path(first.checkpoint.dir) / "step-00000013").string();
  ASSERT_TRUE(std::filesystem::is_directory(path));

  TrainConfig second = c;
  second.checkpoint.dir = (dir_ / "fresh").string();
  second.checkpoint.resume = path;
  TrainedRun resumed = train(second, 1, source);
  EXPECT_EQ(resumed.summary.steps, straight.summary.steps);
  EXPECT_EQ(resumed.weights, straight.weights);
  second.checkpoint.dir = other.checkpoint.dir;
  try {
    train(second, 1, source);
    FAIL() << "resumed into another run's checkpoint folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("this run resumes run"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::is_directory(std::filesystem::path(other.checkpoint.dir) / "step-00000013"));
}

TEST_F(TrainerTest, ResumeWithAnotherReplicaCountContinuesFromTheSameGlobalPosition) {
  // SliceSource gives R replicas the slices of the same global batches, so a run that changes
  // its replica count mid-epoch must still follow the one-replica run, to the 1e-5 of above.
  TrainConfig c = base_config(dir_);
  c.loop.epochs = 3;
  auto source_for = [&](int replicas) {
    return [&, replicas](int r) { return std::make_unique<SliceSource>(data_, r, replicas, 8 / replicas); };
  };
  TrainedRun straight = train(c, 1, source_for(1));
  for (auto [before, after] : {std::pair{2, 1}, std::pair{1, 4}}) {
    TrainConfig first = c;
    first.loop.steps = 13;  // 8 steps per epoch: stops 5 batches into epoch 2
    first.checkpoint.every_steps = 13;
    first.checkpoint.dir = (dir_ / fmt::format("resume-{}-{}", before, after)).string();
    train(first, before, source_for(before));
    TrainConfig second = c;
    second.checkpoint.dir = first.checkpoint.dir;
    second.checkpoint.resume = "auto";
    TrainedRun resumed = train(second, after, source_for(after));
    EXPECT_EQ(resumed.summary.steps, straight.summary.steps) << before << " -> " << after;
    EXPECT_LT(max_relative_difference(straight, resumed), 1e-5) << before << " -> " << after;
  }
}

TEST_F(TrainerTest, PerReplicaBatchNormStatisticsDoNotFailTheChecksum) {
  // BatchNorm's running statistics differ between replicas by design (per-replica batches);
  // the parameter checksum at every step and checkpoint must not count them.
  TrainConfig c = base_config(dir_);
  c.model.name = "small_cnn";
  c.loop.epochs = 1;
  c.distribute.checksum_every_steps = 1;
  TrainedRun run = train(c, 2, [&](int r) { return std::make_unique<SliceSource>(data_, r, 2, 4); });
  EXPECT_EQ(run.summary.steps, 8);
}

// Each replica's own BatchNorm statistics are saved and come back to it: an evaluation after a
// resume equals the uninterrupted run's (replica 1 used to restart from replica 0's statistics).
TEST_F(TrainerTest, PerReplicaBatchNormStatisticsSurviveAResume) {
  TrainConfig c = base_config(dir_);
  c.model.name = "small_cnn";
  c.deterministic = true;
  c.loop.epochs = 2;
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 2, 4); };
  auto eval = [&] {
    std::vector<std::unique_ptr<BatchSource>> e;
    for (int r = 0; r < 2; ++r) e.push_back(std::make_unique<SliceSource>(data_, r, 2, 4));
    return e;
  };
  TrainedRun straight = train(c, 2, source, eval());

  TrainConfig first = c;
  first.loop.steps = 5;
  first.checkpoint.every_steps = 5;
  first.checkpoint.dir = (dir_ / "resume").string();
  train(first, 2, source, eval());
  TrainConfig second = c;
  second.checkpoint.dir = first.checkpoint.dir;
  second.checkpoint.resume = "auto";
  TrainedRun resumed = train(second, 2, source, eval());
  EXPECT_EQ(resumed.weights, straight.weights);
  for (const char* metric : {"eval_loss", "eval_top1"}) {
    EXPECT_EQ(resumed.summary.final_metrics.at(metric), straight.summary.final_metrics.at(metric)) << metric;
  }
}

TEST_F(TrainerTest, SyncBatchNormTwoReplicasTrainAsOne) {
  TrainConfig c = base_config(dir_);
  c.model.name = "small_cnn";  // BatchNorm after each convolution
  c.loop.steps = 20;
  c.loop.epochs = 1;
  c.distribute.checksum_every_steps = 1;  // with synchronised statistics it covers the buffers too
  c.distribute.sync_batchnorm = true;
  TrainedRun one = train(c, 1, [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); });
  auto two_replicas = [&](int r) { return std::make_unique<SliceSource>(data_, r, 2, 4); };
  TrainedRun synced = train(own_dir(c, "synced"), 2, two_replicas);
  EXPECT_EQ(synced.summary.steps, 20);
  EXPECT_LT(max_relative_difference(one, synced), 1e-4);
  // Per-replica statistics normalise each half-batch differently: a visibly different model,
  // so the comparison above is one that can fail.
  c.distribute.sync_batchnorm = false;
  c.distribute.checksum_every_steps = 0;
  TrainedRun per_replica = train(own_dir(c, "per-replica"), 2, two_replicas);
  EXPECT_GT(max_relative_difference(one, per_replica), 1e-3);
}

TEST_F(TrainerTest, UnevenShardsEndTheEpochTogetherAndCountTheDropped) {
  TrainConfig c = base_config(dir_);
  c.loop.epochs = 1;
  // Replica 1 has 8 batches, replica 0 only 3: the epoch ends after 3 steps for both.
  TrainedRun run = train(c, 2, [&](int r) { return std::make_unique<SliceSource>(data_, r, 2, 4, r == 0 ? 3 : 8); });
  EXPECT_EQ(run.summary.steps, 3);
  EXPECT_EQ(run.summary.dropped_examples, 5 * 4);
}

class FailingSource : public SliceSource {
 public:
  FailingSource(const Dataset& d, int rank, int mode) : SliceSource(d, rank, 2, 4), mode_(mode) {}
  bool next(Batch& batch) override {
    if (++calls_ == 3) {
      if (mode_ == 1) throw_error(ErrorCode::kDataLoss, "corrupted record at 1234 in shard-7.tfrecord");
      if (mode_ == 2) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    }
    return SliceSource::next(batch);
  }

 private:
  int mode_;
  int calls_ = 0;
};

TEST_F(TrainerTest, AReplicaThatThrowsStopsAllWithItsCause) {
  TrainConfig c = base_config(dir_);
  try {
    train(c, 2, [&](int r) { return std::make_unique<FailingSource>(data_, r, r == 1 ? 1 : 0); });
    FAIL() << "the corrupt record must stop the run";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
    EXPECT_NE(std::string(e.what()).find("shard-7.tfrecord"), std::string::npos) << e.what();
  }
}

TEST_F(TrainerTest, AStalledReplicaIsNamedByTheWatchdog) {
  TrainConfig c = base_config(dir_);
  c.distribute.watchdog_timeout_s = 0.5;
  auto start = std::chrono::steady_clock::now();
  try {
    train(c, 2, [&](int r) { return std::make_unique<FailingSource>(data_, r, r == 1 ? 2 : 0); });
    FAIL() << "the stalled replica must stop the run";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded) << e.what();
    EXPECT_NE(std::string(e.what()).find("replica 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Too few examples for one global batch, or none: the epoch gives no step. With train.steps that
// used to repeat empty epochs forever; with epochs it ended "successfully" having trained nothing.
TEST_F(TrainerTest, AnEpochWithoutAStepIsAnErrorNotAHang) {
  Dataset tiny = make_dataset(5);  // global batch 8
  for (int64_t steps : {int64_t{0}, int64_t{100}}) {
    TrainConfig c = base_config(dir_);
    c.loop.steps = steps;
    auto start = std::chrono::steady_clock::now();
    try {
      train(c, 2, [&](int r) { return std::make_unique<SliceSource>(tiny, r, 2, 4); });
      FAIL() << "an epoch without a step must stop the run (steps " << steps << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition) << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find("epoch 1 gave no training step"), std::string::npos) << what;
      EXPECT_NE(what.find("a full batch of 4 example(s) on each of the 2 replica(s)"), std::string::npos) << what;
      EXPECT_NE(what.find("train.global_batch_size"), std::string::npos) << what;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  }
}

// Sets the stop flag (as SIGTERM's handler would) when replica `who` fetches its batch `at`.
class StoppingSource : public SliceSource {
 public:
  StoppingSource(const Dataset& d, int rank, std::atomic<int>& stop, int who, int at)
      : SliceSource(d, rank, 2, 4), stop_(stop), who_(who), at_(at), rank_(rank) {}
  bool next(Batch& batch) override {
    if (rank_ == who_ && ++calls_ == at_) stop_.store(15);
    return SliceSource::next(batch);
  }

 private:
  std::atomic<int>& stop_;
  int who_, at_, rank_;
  int calls_ = 0;
};

TEST_F(TrainerTest, AStopRequestEndsEveryReplicaAfterTheSameStepWithACheckpoint) {
  TrainConfig c = base_config(dir_);
  c.deterministic = true;
  c.loop.epochs = 2;  // 8 steps an epoch
  auto plain = [&](int r) { return std::make_unique<SliceSource>(data_, r, 2, 4); };
  TrainedRun straight = train(c, 2, plain);

  // Replica 1 sees the request while fetching epoch 2's second batch (its 12th call: an epoch is
  // 8 batches, the call that finds the end, and the one that drains the rest): nobody trains it.
  TrainConfig first = c;
  first.checkpoint.dir = (dir_ / "stopped").string();
  std::atomic<int> stop{0};
  TrainedRun stopped = train(
      first, 2, [&](int r) { return std::make_unique<StoppingSource>(data_, r, stop, 1, 12); }, {}, &stop);
  EXPECT_EQ(stopped.summary.stop_signal, 15);
  EXPECT_EQ(stopped.summary.steps, 9);
  auto latest = CheckpointManager(first.checkpoint.dir, 0).latest();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->filename().string(), "step-00000009");

  // Resumed, the run ends where one that was never stopped ends, bit for bit.
  TrainConfig again = first;
  again.checkpoint.resume = "auto";
  TrainedRun resumed = train(again, 2, plain);
  EXPECT_EQ(resumed.summary.stop_signal, 0);
  EXPECT_EQ(resumed.summary.steps, straight.summary.steps);
  EXPECT_EQ(resumed.weights, straight.weights);
}

TEST_F(TrainerTest, ImagesOfAnotherSizeThanTheModelsAreRefusedBeforeTheFirstStep) {
  TrainConfig c = base_config(dir_);
  c.model.input_size = 8;  // the data is 6 x 6
  try {
    train(c, 2, [&](int r) { return std::make_unique<SliceSource>(data_, r, 2, 4); });
    FAIL() << "6x6 images for a model configured for 8x8";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("images of 1 channel(s) x 6 x 6"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.input_size 8"), std::string::npos) << e.what();
  }
}

TEST_F(TrainerTest, TheRunsLastStepIsSavedWhateverTheCheckpointInterval) {
  TrainConfig c = base_config(dir_);
  c.loop.epochs = 1;  // 8 steps
  c.checkpoint.every_steps = 5;
  train(c, 1, [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); });
  auto latest = CheckpointManager(c.checkpoint.dir, 0).latest();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->filename().string(), "step-00000008") << "steps 6 to 8 were trained and must be saved";
}

// A run gone NaN stops with an error naming the steps (or the parameter), and no checkpoint holds its
// weights: the steps since the last log line, and the parameters, are checked before each save.
TEST_F(TrainerTest, ANaNLossStopsTheRunBeforeACheckpointSavesIt) {
  TrainConfig c = base_config(dir_);
  c.optimizer.lr = 1e10f;
  c.loop.log_every_steps = 1000;  // no log line: only the check before each save sees the loss
  c.checkpoint.every_steps = 1;
  c.checkpoint.keep_last = 100;
  auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); };
  try {
    train(c, 1, source);
    FAIL() << "a run with lr 1e10 trained to its end";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    const std::string what = e.what();
    // The loss, or (first, since 2026-12-05) the parameters the step's update made NaN or inf.
    EXPECT_TRUE(what.find("the training loss is") != std::string::npos ||
                what.find("holds NaN or inf") != std::string::npos)
        << what;
    EXPECT_NE(what.find("train.on_nan_loss: warn"), std::string::npos) << what;
  }
  const auto saved = CheckpointManager(c.checkpoint.dir, 0).complete_checkpoints();
  for (const auto& path : saved) {
    for (const auto& [name, t] : read_safetensors(path / CheckpointManager::kModelFile).tensors) {
      for (float v : t.to_vector()) ASSERT_TRUE(std::isfinite(v)) << path << " " << name;
    }
  }

  // train.on_nan_loss: warn trains to the end, and the summary says what the loss was.
  c.loop.on_nan_loss = "warn";
  c.loop.log_every_steps = 4;
  c.checkpoint.dir = (dir_ / "warn").string();
  TrainedRun run = train(c, 1, source);
  EXPECT_EQ(run.summary.steps, 16);
  EXPECT_FALSE(std::isfinite(run.summary.final_metrics.at("train_loss")));
}

// A metric never measured is absent, not 0: a run shorter than one log interval has no train loss.
TEST_F(TrainerTest, ARunShorterThanTheLogIntervalReportsNoTrainLoss) {
  TrainConfig c = base_config(dir_);
  c.loop.steps = 3;
  c.loop.log_every_steps = 50;
  TrainedRun run = train(c, 1, [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); });
  EXPECT_EQ(run.summary.steps, 3);
  EXPECT_EQ(run.summary.final_metrics.count("train_loss"), 0u);
}

class ThrowingEvalSource : public SliceSource {
 public:
  using SliceSource::SliceSource;
  bool next(Batch&) override { throw_error(ErrorCode::kInvalidArgument, "label 11 out of range in eval.tfrecord"); }
};

TEST_F(TrainerTest, AFailingEvaluationKeepsTheEpochsCheckpoint) {
  TrainConfig c = base_config(dir_);
  c.loop.epochs = 1;
  std::vector<std::unique_ptr<BatchSource>> eval;
  eval.push_back(std::make_unique<ThrowingEvalSource>(data_, 0, 1, 8));
  EXPECT_THROW(train(c, 1, [&](int r) { return std::make_unique<SliceSource>(data_, r, 1, 8); }, std::move(eval)),
               Error);
  CheckpointManager checkpoints(c.checkpoint.dir, 0);
  auto latest = checkpoints.latest();
  ASSERT_TRUE(latest.has_value()) << "the epoch's 8 steps were trained and must be saved before evaluating";
  EXPECT_EQ(latest->filename().string(), "step-00000008");
}

}  // namespace
}  // namespace tandem::train
