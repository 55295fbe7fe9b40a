// The language-modelling task through the Trainer (a small GPT on token windows of a repeating
// text): it learns, its evaluation reports perplexity exp(loss) and bits per byte, two replicas
// train as one; and gradient accumulation: K micro-batches give the step one K-times batch gives,
// on one replica and on two, and a K that does not divide the batch is refused naming the numbers.
// The training loss applies train.label_smoothing as PyTorch's CrossEntropyLoss does.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "engine/autograd/ops.h"
#include "engine/backend/ops.h"
#include "engine/nn/linear_head.h"
#include "engine/train/language_task.h"
#include "tests/train/trainer_fixture.h"

namespace tandem::train {
namespace {

using namespace fixture;

constexpr int64_t kWindow = 9;  // 8 predicted tokens per window

// Windows of a repeating byte text, global batch k of an epoch sliced among replicas as SliceSource.
class TokenSource : public BatchSource {
 public:
  TokenSource(int rank, int replicas, int64_t per_replica) : rank_(rank), replicas_(replicas), b_(per_replica) {}
  void start_epoch(int64_t) override { k_ = 0; }
  bool next(Batch& batch) override {
    if (k_ >= 4) return false;
    Tensor tokens = Tensor::empty({b_, kWindow}, DType::kI64);
    const std::string text = "the cat sat on the mat. ";
    for (int64_t i = 0; i < b_; ++i) {
      const int64_t window = k_ * b_ * replicas_ + rank_ * b_ + i;
      for (int64_t j = 0; j < kWindow; ++j) {
        tokens.data<int64_t>()[i * kWindow + j] =
            static_cast<unsigned char>(text[static_cast<size_t>((window * 5 + j) % static_cast<int64_t>(text.size()))]);
      }
    }
    batch.set(kTokens, tokens);
    ++k_;
    return true;
  }

 private:
  int rank_, replicas_;
  int64_t b_, k_ = 0;
};

TrainConfig gpt_config(const std::filesystem::path& dir) {
  TrainConfig c = base_config(dir);
  c.model = {.name = "gpt", .block_size = 16, .vocab_size = 256, .n_layer = 2, .n_head = 2, .n_embd = 32};
  c.optimizer = {.name = "adamw", .lr = 3e-3f, .weight_decay = 0.1f, .exclude_norm_and_bias_from_weight_decay = true};
  c.loop.epochs = 6;
  return c;
}

auto token_sources(int replicas) {
  return [replicas](int r) { return std::make_unique<TokenSource>(r, replicas, 8 / replicas); };
}

TEST_F(TrainerTest, AGptLearnsATextAndReportsPerplexityAndBitsPerByte) {
  TrainConfig c = gpt_config(dir_);
  std::vector<std::unique_ptr<BatchSource>> eval;
  eval.push_back(std::make_unique<TokenSource>(0, 1, 8));
  TrainedRun run = train(c, 1, token_sources(1), std::move(eval));
  const double loss = run.summary.final_metrics.at("eval_loss");
  EXPECT_LT(loss, 0.5 * std::log(256.0)) << "a repeating text is far easier than uniform bytes";
  EXPECT_NEAR(run.summary.final_metrics.at("eval_perplexity"), std::exp(loss), 1e-9 * std::exp(loss));
  EXPECT_NEAR(run.summary.final_metrics.at("eval_bits_per_byte"), loss / std::numbers::ln2, 1e-9);
}

TEST_F(TrainerTest, TwoGptReplicasTrainAsOne) {
  TrainConfig c = gpt_config(dir_);
  c.loop.epochs = 2;
  TrainedRun one = train(c, 1, token_sources(1));
  TrainedRun two = train(own_dir(c, "two"), 2, token_sources(2));
  EXPECT_LT(max_relative_difference(one, two), 1e-5);
}

TEST_F(TrainerTest, GradientAccumulationEqualsTheWholeBatch) {
  for (int replicas : {1, 2}) {
    TrainConfig c = base_config(dir_);
    c.loop.steps = 10;
    auto source = [&](int r) { return std::make_unique<SliceSource>(data_, r, replicas, 8 / replicas); };
    TrainedRun whole = train(own_dir(c, fmt::format("whole-{}", replicas)), replicas, source);
    c.loop.grad_accumulation_steps = 2;
    TrainedRun accumulated = train(own_dir(c, fmt::format("accumulated-{}", replicas)), replicas, source);
    EXPECT_LT(max_relative_difference(whole, accumulated), 1e-6) << replicas << " replica(s)";
    EXPECT_NEAR(accumulated.summary.final_metrics.at("train_loss"), whole.summary.final_metrics.at("train_loss"),
                1e-5);
  }
  TrainConfig c = base_config(dir_);
  c.loop.grad_accumulation_steps = 3;
  try {
    train(c, 2, [&](int r) { return std::make_unique<SliceSource>(data_, r, 2, 4); });
    FAIL() << "3 micro-batches of a per-replica batch of 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grad_accumulation_steps 3 does not divide the per-replica batch 4"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::train

namespace tandem::train {
namespace {

// train.label_smoothing reached the image task only: the GPT's training loss hard-coded 0.
TEST(LanguageModelingTask, TrainingLossAppliesLabelSmoothing) {
  const ModelConfig m{.name = "gpt", .block_size = 16, .vocab_size = 256, .n_layer = 1, .n_head = 2, .n_embd = 16};
  auto model = models::create_model(m);
  ExecutionContext ctx(Device::cpu(), 1);
  TokenSource source(0, 1, 4);
  source.start_epoch(0);
  Batch batch;
  ASSERT_TRUE(source.next(batch));
  auto loss_with = [&](float smoothing) {
    LanguageModeling task(m, smoothing);
    Tensor sums = Tensor::zeros({2});
    const Tensor one = Tensor::from_vector({1.0f}, Shape{});
    TaskStep step{ctx, 4, sums, one};
    return static_cast<double>(task.train_step(step, *model, batch).value().to_vector()[0]);
  };
  // PyTorch's smoothing over V classes: (1 - s) * CE + s * mean_k(-log p_k), per token.
  const Tensor tokens = batch.at(kTokens);
  autograd::Variable logits = model->forward(ctx, autograd::Variable(backend::narrow(ctx, tokens, 1, 0, kWindow - 1)));
  const Tensor targets = backend::narrow(ctx, tokens, 1, 1, kWindow - 1);
  const double reference =
      autograd::cross_entropy_loss(ctx, logits, targets, 0.1f, 4 * (kWindow - 1)).value().to_vector()[0];
  EXPECT_NE(loss_with(0.1f), loss_with(0.0f));
  EXPECT_NEAR(loss_with(0.1f), reference, 1e-6 * std::fabs(reference));
}


// The GPT ends in a linear head, so the task runs it fused with the loss (the logits never exist
// whole): on the CPU, one chunk holds these 32 tokens, and the loss and every gradient are the
// unfused forward's bit for bit.
TEST(LanguageModelingTask, TheGptHeadRunsFusedWithTheLossAndGivesTheUnfusedGradients) {
  const ModelConfig m{.name = "gpt", .block_size = 16, .vocab_size = 256, .n_layer = 1, .n_head = 2, .n_embd = 16};
  auto model = models::create_model(m);
  ASSERT_NE(dynamic_cast<nn::LinearHead*>(model.get()), nullptr);
  ExecutionContext ctx(Device::cpu(), 1);
  TokenSource source(0, 1, 4);
  source.start_epoch(0);
  Batch batch;
  ASSERT_TRUE(source.next(batch));
  LanguageModeling task(m, 0.1f);
  Tensor sums = Tensor::zeros({2});
  const Tensor one = Tensor::from_vector({1.0f}, Shape{});
  TaskStep step{ctx, 4, sums, one};
  autograd::Variable fused = task.train_step(step, *model, batch);
  fused.backward(&ctx);
  std::vector<std::vector<float>> fused_grads;
  for (auto& [name, p] : model->named_parameters()) fused_grads.push_back(p.grad().to_vector());
  model->zero_grad();

  const Tensor tokens = batch.at(kTokens);
  autograd::Variable logits = model->forward(ctx, autograd::Variable(backend::narrow(ctx, tokens, 1, 0, kWindow - 1)));
  const Tensor targets = backend::narrow(ctx, tokens, 1, 1, kWindow - 1);
  autograd::Variable unfused = autograd::cross_entropy_loss(ctx, logits, targets, 0.1f, 4 * (kWindow - 1));
  unfused.backward(&ctx);
  EXPECT_EQ(fused.value().to_vector(), unfused.value().to_vector());
  size_t i = 0;
  for (auto& [name, p] : model->named_parameters()) EXPECT_EQ(fused_grads[i++], p.grad().to_vector()) << name;
  EXPECT_EQ(i, fused_grads.size());
}

}  // namespace
}  // namespace tandem::train
