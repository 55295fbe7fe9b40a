// Callbacks and tasks: what a callback sees of a run, its requests (stop, learning-rate scale)
// honoured by every replica after the same step and kept across a resume, the built-in early
// stopping, a task of the program's own with named tensors and device-side metric sums, and the
// resume check of a batch source that breaks its promise.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <set>

#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/train/metrics_csv_sink.h"
#include "tests/support/files.h"
#include "tests/train/trainer_fixture.h"

namespace tandem::train {
namespace {

using namespace fixture;

// Counts every call and keeps what it was told.
class Recorder : public Callback {
 public:
  void on_train_begin(const RunInfo& run, TrainerControl&) override { begins.push_back(run); }
  void on_step_end(const StepReport& step, TrainerControl& control) override {
    steps.push_back(step.step);
    if (step.has_metrics) metric_steps.push_back(step.step);
    if (step.step == stop_at) control.request_stop("recorder: enough");
    if (step.step == scale_at) control.set_lr_scale(scale);
  }
  void on_epoch_end(const EpochReport& e, TrainerControl&) override { epochs.push_back(e.epoch); }
  void on_eval_end(const EvalReport& e, TrainerControl&) override { evals.push_back(e); }
  void on_checkpoint(const CheckpointReport& c, TrainerControl&) override { checkpoints.push_back(c.step); }
  void on_train_end(const RunSummary& s) override { ends.push_back(s.steps); }

  int64_t stop_at = -1, scale_at = -1;
  double scale = 1;
  std::vector<RunInfo> begins;
  std::vector<int64_t> steps, metric_steps, epochs, checkpoints, ends;
  std::vector<EvalReport> evals;
};

class TrainerCallbacksTest : public TrainerTest {
 protected:
  std::function<std::unique_ptr<BatchSource>(int)> slices(int replicas) {
    return [this, replicas](int r) { return std::make_unique<SliceSource>(data_, r, replicas, 8 / replicas); };
  }
  std::vector<std::unique_ptr<BatchSource>> eval_sources(int replicas) {
    std::vector<std::unique_ptr<BatchSource>> out;
    for (int r = 0; r < replicas; ++r) out.push_back(std::make_unique<SliceSource>(data_, r, replicas, 8 / replicas));
    return out;
  }
};

TEST_F(TrainerCallbacksTest, ACallbackSeesEveryStepEpochEvaluationAndCheckpoint) {
  TrainConfig c = base_config(dir_);  // 2 epochs of 8 steps, metrics every 4 steps
  auto recorder = std::make_shared<Recorder>();
  TrainedRun run = train(c, 2, slices(2), eval_sources(2), nullptr, {recorder});
  ASSERT_EQ(recorder->begins.size(), 1u);
  EXPECT_EQ(recorder->begins[0].start_step, 0);
  EXPECT_EQ(recorder->begins[0].replicas, 2);
  EXPECT_EQ(recorder->begins[0].global_batch_size, 8);
  EXPECT_EQ(recorder->steps.size(), 16u);
  EXPECT_EQ(recorder->steps.back(), 16);
  EXPECT_EQ(recorder->metric_steps, (std::vector<int64_t>{4, 8, 12, 16}));
  EXPECT_EQ(recorder->epochs, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(recorder->checkpoints, (std::vector<int64_t>{8, 16}));
  ASSERT_EQ(recorder->evals.size(), 2u);
  EXPECT_EQ(recorder->evals[1].step, 16);
  EXPECT_EQ(recorder->evals[1].examples, 64);
  EXPECT_DOUBLE_EQ(recorder->evals[1].scalars.get("eval/top1"), run.summary.final_metrics.at("eval_top1"));
  EXPECT_NE(recorder->evals[1].text.find("top-5"), std::string::npos);
  EXPECT_EQ(recorder->ends, (std::vector<int64_t>{16}));
}

// Watches the disk around each checkpoint: whether its directory existed before it was written,
// and which steps' rows metrics.csv held once it was committed.
class DiskWatcher : public Callback {
 public:
  explicit DiskWatcher(std::filesystem::path dir) : dir_(std::move(dir)) {}
  void on_checkpoint_begin(int64_t step, TrainerControl&) override {
    begins.push_back(step);
    if (std::filesystem::exists(dir_ / "checkpoints" / fmt::format("step-{:08d}", step))) existed_before.push_back(step);
  }
  void on_checkpoint(const CheckpointReport& c, TrainerControl&) override {
    std::ifstream csv(dir_ / "metrics.csv");
    std::set<int64_t> on_disk;
    for (std::string row; std::getline(csv, row);) {
      if (std::optional<int64_t> step = metrics_csv_step(row)) on_disk.insert(*step);
    }
    rows_on_disk_at_commit.push_back(on_disk.count(c.step) > 0);
  }

  std::vector<int64_t> begins, existed_before;
  std::vector<bool> rows_on_disk_at_commit;

 private:
  std::filesystem::path dir_;
};

// A kill right after a checkpoint is committed must not lose the rows of the steps up to it: the
// resumed run starts after them and never writes them again. So they are flushed before the save.
// The watcher comes before MetricsWriter, which would hide a flush made only after the save.
TEST_F(TrainerCallbacksTest, MetricsRowsOfACheckpointedStepAreOnDiskBeforeTheCheckpointIsCommitted) {
  TrainConfig c = base_config(dir_);  // metrics every 4 steps
  c.checkpoint.every_steps = 4;
  auto watcher = std::make_shared<DiskWatcher>(dir_);
  std::filesystem::create_directories(dir_);
  auto sink = std::make_shared<MetricsCsvSink>(dir_, /*flush_every_s=*/1e9);  // no timed flush
  train(c, 2, slices(2), {}, nullptr, {watcher, std::make_shared<MetricsWriter>(sink)});
  EXPECT_EQ(watcher->begins, (std::vector<int64_t>{4, 8, 12, 16}));
  EXPECT_TRUE(watcher->existed_before.empty());
  EXPECT_EQ(watcher->rows_on_disk_at_commit, (std::vector<bool>{true, true, true, true}));
}

// The Trainer makes its run directory, with its parents, before a callback starts (as TF's
// CheckpointManager makes its own): a callback may write there from on_train_begin.
class BeginWriter : public Callback {
 public:
  void on_train_begin(const RunInfo& run, TrainerControl&) override { std::ofstream(run.run_dir / "begun") << "1\n"; }
};

TEST_F(TrainerCallbacksTest, TheTrainerMakesItsRunDirectoryBeforeACallbackStarts) {
  TrainConfig c = base_config(dir_);  // checkpoints in dir_/checkpoints, beside the run directory
  c.loop.epochs = 1;
  c.output.run_dir = (dir_ / "runs" / "a").string();
  train(c, 1, slices(1), {}, nullptr, {std::make_shared<BeginWriter>()});
  EXPECT_EQ(testing::read_file(dir_ / "runs" / "a" / "begun"), "1\n");
}

TEST_F(TrainerCallbacksTest, AStopRequestEndsEveryReplicaAfterTheSameStepAndResumesExactly) {
  TrainConfig c = base_config(dir_);
  c.deterministic = true;
  c.distribute.checksum_every_steps = 1;
  TrainedRun straight = train(c, 2, slices(2));

  TrainConfig first = c;
  first.checkpoint.dir = (dir_ / "stopped").string();
  auto stopper = std::make_shared<Recorder>();
  stopper->stop_at = 5;
  TrainedRun stopped = train(first, 2, slices(2), {}, nullptr, {stopper});
  EXPECT_EQ(stopped.summary.steps, 5);
  EXPECT_EQ(stopped.summary.stop_reason, "recorder: enough");
  EXPECT_EQ(stopped.summary.stop_signal, 0);
  EXPECT_EQ(stopper->checkpoints, (std::vector<int64_t>{5}));

  TrainConfig second = first;
  second.checkpoint.resume = "auto";
  TrainedRun resumed = train(second, 2, slices(2));
  EXPECT_EQ(resumed.summary.steps, 16);
  EXPECT_EQ(resumed.weights, straight.weights);
}

TEST_F(TrainerCallbacksTest, AnLrScaleOfZeroFreezesEveryReplicaFromTheNextStepAndSurvivesAResume) {
  TrainConfig c = base_config(dir_);
  c.optimizer.momentum = 0;  // with momentum, earlier gradients would still move the weights
  c.loop.steps = 3;
  TrainedRun three_steps = train(c, 2, slices(2));

  TrainConfig frozen = c;
  frozen.loop.steps = 10;
  frozen.checkpoint.every_steps = 6;
  frozen.checkpoint.dir = (dir_ / "frozen").string();
  auto scaler = std::make_shared<Recorder>();
  scaler->scale_at = 3;
  scaler->scale = 0;
  TrainedRun run = train(frozen, 2, slices(2), {}, nullptr, {scaler});
  EXPECT_EQ(run.summary.steps, 10);
  EXPECT_EQ(run.weights, three_steps.weights);

  // The checkpoint of step 6 holds the scale: a resumed run stays frozen without being told.
  TrainConfig resumed_config = frozen;
  resumed_config.loop.steps = 12;
  resumed_config.checkpoint.resume = (dir_ / "frozen" / "step-00000006").string();
  TrainedRun resumed = train(resumed_config, 2, slices(2));
  EXPECT_EQ(resumed.weights, three_steps.weights);
}

TEST_F(TrainerCallbacksTest, EarlyStoppingStopsAfterPatienceAndKeepsItsCountAcrossAResume) {
  TrainConfig c = base_config(dir_);
  c.loop.eval_every_steps = 2;
  c.loop.epochs = 4;
  // A loss that must rise never improves: best at the first evaluation, then patience runs out.
  auto rising = [] { return std::make_shared<EarlyStopping>("eval/loss", 3, /*maximize=*/true); };
  TrainedRun run = train(c, 1, slices(1), eval_sources(1), nullptr, {rising()});
  EXPECT_EQ(run.summary.steps, 8);  // evaluations at 2 (best), 4, 6, 8 (the third without improvement)
  EXPECT_NE(run.summary.stop_reason.find("early stopping: eval/loss has not improved"), std::string::npos)
      << run.summary.stop_reason;

  // Stopped by train.steps after evaluations at 2 and 4; resumed, the count goes on from 1.
  TrainConfig first = c;
  first.loop.steps = 4;
  first.checkpoint.dir = (dir_ / "early").string();
  train(first, 1, slices(1), eval_sources(1), nullptr, {rising()});
  TrainConfig second = first;
  second.loop.steps = 30;
  second.checkpoint.resume = "auto";
  TrainedRun resumed = train(second, 1, slices(1), eval_sources(1), nullptr, {rising()});
  EXPECT_EQ(resumed.summary.steps, 8);
}

TEST_F(TrainerCallbacksTest, AMonitoredMetricThatIsNotReportedIsAnError) {
  TrainConfig c = base_config(dir_);
  try {
    train(c, 1, slices(1), eval_sources(1), nullptr, {std::make_shared<EarlyStopping>("eval/accuracy", 2)});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'eval/accuracy' is not among the reported ones: eval/loss, eval/top1"),
              std::string::npos)
        << e.what();
  }
}

// Regression on named tensors: "features" (N, 36) to "target" (N, 4) one-hot, mean squared error.
class OneHotSource : public SliceSource {
 public:
  using SliceSource::SliceSource;
  bool next(Batch& batch) override {
    if (!SliceSource::next(batch)) return false;
    const Tensor& labels = batch.at(kLabel);
    Tensor target = Tensor::zeros({labels.numel(), kClasses});
    for (int64_t i = 0; i < labels.numel(); ++i) target.data<float>()[i * kClasses + labels.data<int64_t>()[i]] = 1;
    Batch named;
    named.set("features", batch.at(kImage).reshape({labels.numel(), 36}));
    named.set("target", target);
    batch = named;
    return true;
  }
};

class SquaredError : public Task {
 public:
  std::vector<std::string> train_metrics() const override { return {"mse"}; }
  std::vector<std::string> eval_metrics() const override { return {"mse"}; }
  autograd::Variable train_step(TaskStep& step, nn::Module& model, const Batch& batch) override {
    autograd::Variable y = model.forward(step.ctx, autograd::Variable(batch.at("features")));
    autograd::Variable diff = autograd::add(step.ctx, y, autograd::scale(step.ctx, autograd::Variable(batch.at("target")), -1.0f));
    autograd::Variable total = autograd::sum(step.ctx, autograd::mul(step.ctx, diff, diff));
    autograd::Variable loss = autograd::scale(step.ctx, total, 1.0f / static_cast<float>(step.global_batch_size));
    add_to_sum(step, 0, total.value());
    add_to_sum(step, 1, static_cast<double>(batch.size()));
    return loss;
  }
  int64_t eval_step(ExecutionContext& ctx, nn::Module& model, const Batch& batch, std::span<double> sums) override {
    autograd::Variable y = model.forward(ctx, autograd::Variable(batch.at("features")));
    std::vector<float> out = y.value().to_vector(), target = batch.at("target").to_vector();
    for (size_t i = 0; i < out.size(); ++i) sums[0] += (out[i] - target[i]) * (out[i] - target[i]);
    return batch.size();
  }
};

class Tags : public MetricsSink {
 public:
  void scalar(const std::string& tag, double value, int64_t step) override { values[tag][step] = value; }
  std::map<std::string, std::map<int64_t, double>> values;
};

TEST_F(TrainerCallbacksTest, AProgramsOwnTaskTrainsOnNamedTensorsAndReportsItsMetrics) {
  TrainConfig c = base_config(dir_);
  c.model.num_classes = kClasses;
  c.model.input_size = 6;  // mlp flattens 1 x 6 x 6 = 36 features
  c.loop.epochs = 6;
  auto run_with = [&](int replicas, std::shared_ptr<Tags> tags) {
    TrainerSetup setup;
    setup.config = c;
    setup.plan = distribute::plan_replicas({.device = "cpu", .devices = fmt::format("cpu:{}", replicas),
                                            .global_batch_size = 8, .cores = replicas});
    setup.make_model = [&] {
      return models::create_model({.name = "mlp", .num_classes = kClasses, .in_channels = 1, .input_size = 6,
                                   .hidden = {16}});
    };
    setup.task = std::make_shared<SquaredError>();
    for (int r = 0; r < replicas; ++r) {
      setup.train_sources.push_back(std::make_unique<OneHotSource>(data_, r, replicas, 8 / replicas));
      setup.eval_sources.push_back(std::make_unique<OneHotSource>(data_, r, replicas, 8 / replicas));
    }
    setup.callbacks = {std::make_shared<MetricsWriter>(tags)};
    setup.run_dir = dir_;
    return Trainer(std::move(setup)).run();
  };
  auto one = std::make_shared<Tags>(), two = std::make_shared<Tags>();
  RunSummary a = run_with(1, one);
  std::filesystem::remove_all(dir_);
  RunSummary b = run_with(2, two);
  const auto& mse = one->values.at("train/mse");
  EXPECT_LT(mse.rbegin()->second, 0.5 * mse.begin()->second) << "the loss falls";
  EXPECT_EQ(a.final_metrics.count("train_mse"), 1u);
  EXPECT_LT(a.final_metrics.at("eval_mse"), mse.begin()->second);
  // Two replicas see the same examples per global batch: the same curve, to rounding.
  for (const auto& [step, value] : mse) EXPECT_NEAR(two->values.at("train/mse").at(step), value, 1e-4) << step;
  EXPECT_NEAR(b.final_metrics.at("eval_mse"), a.final_metrics.at("eval_mse"), 1e-4);
}

// Changes every batch's images: the same source to the trainer, other batches.
class ShiftedSource : public SliceSource {
 public:
  using SliceSource::SliceSource;
  bool next(Batch& batch) override {
    if (!SliceSource::next(batch)) return false;
    batch.at(kImage).data<float>()[0] += 1.0f;
    return true;
  }
};

TEST_F(TrainerCallbacksTest, AResumedSourceThatGivesOtherBatchesIsRefusedNamingTheBatch) {
  for (bool stop_request : {false, true}) {
    TrainConfig first = base_config(dir_);
    first.checkpoint.dir = (dir_ / fmt::format("broken-{}", stop_request)).string();
    std::vector<std::shared_ptr<Callback>> callbacks;
    if (stop_request) {
      auto stopper = std::make_shared<Recorder>();
      stopper->stop_at = 3;  // the checkpoint's fingerprint is of the fetched, untrained 4th batch
      callbacks.push_back(stopper);
    } else {
      first.loop.steps = 5;  // the checkpoint's fingerprint is of the 5th batch, trained
    }
    train(first, 2, slices(2), {}, nullptr, callbacks);
    TrainConfig second = first;
    second.loop.steps = 0;
    second.checkpoint.resume = "auto";
    try {
      train(second, 2, [&](int r) { return std::make_unique<ShiftedSource>(data_, r, 2, 4); });
      FAIL() << "a source that changed must not resume";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
      const std::string want = stop_request ? "gives another batch 4 of epoch 1" : "gives another batch 5 of epoch 1";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("same batches in the same order"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem::train
