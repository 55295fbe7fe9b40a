// The fixture of the trainer's tests on CPU replicas: a small learnable dataset in memory, a
// source that slices each global batch among replicas as the auto-shard does, and a run helper.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <map>
#include <mutex>

#include "engine/core/random.h"
#include "engine/train/callbacks.h"
#include "engine/train/classification_task.h"
#include "engine/train/trainer.h"
#include "models/registry.h"

namespace tandem::train::fixture {

constexpr int kClasses = 4;

// Examples 0..n-1 with images that depend on the label, so there is something to learn.
struct Dataset {
  Tensor x;       // (n, 1, 6, 6)
  Tensor labels;  // (n)
};

inline Dataset make_dataset(int64_t n) {
  Generator g(99);
  Dataset d{Tensor::empty({n, 1, 6, 6}), Tensor::empty({n}, DType::kI64)};
  for (int64_t i = 0; i < n; ++i) {
    int64_t label = static_cast<int64_t>(g.below(kClasses));
    d.labels.data<int64_t>()[i] = label;
    for (int64_t j = 0; j < 36; ++j) d.x.data<float>()[i * 36 + j] = 0.5f * g.normal() + (j % kClasses == label ? 1.0f : 0.0f);
  }
  return d;
}

// Global batch k of an epoch is examples perm[k*B, (k+1)*B); replica r takes its r-th slice,
// so R replicas see exactly the examples one replica with batch B sees.
class SliceSource : public BatchSource {
 public:
  SliceSource(const Dataset& data, int rank, int replicas, int64_t per_replica, int64_t limit = -1)
      : data_(data), rank_(rank), replicas_(replicas), b_(per_replica), limit_(limit) {}
  void start_epoch(int64_t epoch) override {
    int64_t n = data_.labels.numel();
    perm_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) perm_[static_cast<size_t>(i)] = i;
    Generator g(1234, static_cast<uint64_t>(epoch));
    for (int64_t i = n - 1; i > 0; --i) std::swap(perm_[static_cast<size_t>(i)], perm_[g.below(static_cast<uint64_t>(i + 1))]);
    k_ = 0;
  }
  bool next(Batch& batch) override {
    int64_t global = b_ * replicas_;
    int64_t batches = static_cast<int64_t>(perm_.size()) / global;
    if (limit_ >= 0) batches = std::min(batches, limit_);
    if (k_ >= batches) return false;
    Tensor x = Tensor::empty({b_, 1, 6, 6});
    Tensor labels = Tensor::empty({b_}, DType::kI64);
    for (int64_t i = 0; i < b_; ++i) {
      int64_t e = perm_[static_cast<size_t>(k_ * global + rank_ * b_ + i)];
      std::copy_n(data_.x.data<float>() + e * 36, 36, x.data<float>() + i * 36);
      labels.data<int64_t>()[i] = data_.labels.data<int64_t>()[e];
    }
    batch.set(kImage, x);
    batch.set(kLabel, labels);
    ++k_;
    return true;
  }

 private:
  const Dataset& data_;
  int rank_, replicas_;
  int64_t b_, limit_;
  std::vector<int64_t> perm_;
  int64_t k_ = 0;
};

struct TrainedRun {
  RunSummary summary;
  std::map<std::string, std::vector<float>> weights;  // replica 0's parameters at the end
};

inline TrainConfig base_config(const std::filesystem::path& dir) {
  TrainConfig c;
  c.seed = 5;
  c.model = {.name = "mlp", .num_classes = kClasses, .in_channels = 1, .input_size = 6, .hidden = {16}};
  c.loop.global_batch_size = 8;
  c.loop.epochs = 2;
  c.loop.log_every_steps = 4;
  c.loop.warmup_steps_for_timing = 1;
  c.optimizer = {.name = "sgd", .lr = 0.02f, .momentum = 0.9f};
  c.checkpoint.dir = (dir / "checkpoints").string();
  c.output.run_dir = dir.string();
  c.distribute.watchdog_timeout_s = 20;
  return c;
}

// The same run with a checkpoint folder of its own (dir_/name): two runs never share one, and a
// fresh run in a folder holding another run's checkpoints is refused (docs/CHECKPOINTS.md).
inline TrainConfig own_dir(TrainConfig c, const std::string& name) {
  c.checkpoint.dir = (std::filesystem::path(c.output.run_dir) / name).string();
  return c;
}

// Builds the setup for `replicas` CPU replicas; source(r) makes replica r's training source.
inline TrainedRun train(TrainConfig config, int replicas,
                        const std::function<std::unique_ptr<BatchSource>(int)>& source,
                        std::vector<std::unique_ptr<BatchSource>> eval = {}, const std::atomic<int>* stop = nullptr,
                        std::vector<std::shared_ptr<Callback>> callbacks = {}) {
  TrainerSetup setup;
  setup.config = config;
  setup.plan = distribute::plan_replicas({.device = "cpu", .devices = fmt::format("cpu:{}", replicas),
                                          .global_batch_size = config.loop.global_batch_size, .cores = replicas});
  std::mutex mutex;
  std::vector<std::shared_ptr<nn::Module>> built;
  setup.make_model = [&] {
    auto m = models::create_model(config.model);
    std::lock_guard lock(mutex);
    built.push_back(m);
    return m;
  };
  for (int r = 0; r < replicas; ++r) setup.train_sources.push_back(source(r));
  setup.eval_sources = std::move(eval);
  setup.run_dir = config.output.run_dir;
  setup.stop = stop;
  setup.callbacks = std::move(callbacks);
  Trainer trainer(std::move(setup));
  TrainedRun run;
  run.summary = trainer.run();
  for (auto& [name, p] : built.front()->named_parameters()) run.weights[name] = p.value().to_vector();
  // Every replica ends with bitwise the same parameters (compared as bits: NaN weights too).
  auto bits = [](const std::vector<float>& v) {
    std::vector<uint32_t> out(v.size());
    std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
    return out;
  };
  for (auto& m : built) {
    for (auto& [name, p] : m->named_parameters()) {
      EXPECT_EQ(bits(p.value().to_vector()), bits(run.weights[name])) << name;
    }
  }
  return run;
}

// The largest |a - b| / (1 + |a|) over every weight of two runs.
inline double max_relative_difference(const TrainedRun& a, const TrainedRun& b) {
  double worst = 0;
  for (auto& [name, w] : a.weights) {
    const auto& v = b.weights.at(name);
    for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(double{v[i]} - w[i]) / (1 + std::fabs(w[i])));
  }
  return worst;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("tandem-trainer-{}-{}", ::testing::UnitTest::GetInstance()->current_test_info()->name(), getpid());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Trains c on one replica for `steps` steps, with a checkpoint at the last one in dir_/name, and
  // returns c set to resume from it (resume: auto) to the end.
  TrainConfig interrupted_at(const TrainConfig& c, int64_t steps, const std::string& name,
                             const std::function<std::unique_ptr<BatchSource>(int)>& source) {
    TrainConfig first = c;
    first.loop.steps = steps;
    first.checkpoint.every_steps = steps;
    first.checkpoint.dir = (dir_ / name).string();
    train(first, 1, source);
    TrainConfig second = c;
    second.checkpoint.dir = first.checkpoint.dir;
    second.checkpoint.resume = "auto";
    return second;
  }
  std::filesystem::path dir_;
  Dataset data_ = make_dataset(64);
};

}  // namespace tandem::train::fixture
