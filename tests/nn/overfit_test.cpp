// End to end on the CPU backend: a small CNN memorises 64 random samples, and once warmed up
// a training step allocates nothing from the system.
#include <gtest/gtest.h>

#include "engine/backend/ops.h"
#include "engine/core/allocator.h"
#include "engine/nn/init.h"
#include "engine/nn/layers.h"

namespace tandem::nn {
namespace {

std::shared_ptr<Sequential> small_cnn(int classes) {
  auto m = std::make_shared<Sequential>();
  m->push_back(std::make_shared<Conv2d>(Conv2dOptions{.in_channels = 1, .out_channels = 8, .padding = 1, .bias = false}));
  m->push_back(std::make_shared<BatchNorm2d>(8));
  m->push_back(std::make_shared<ReLU>());
  m->push_back(std::make_shared<MaxPool2d>(2, 2));
  m->push_back(std::make_shared<Conv2d>(Conv2dOptions{.in_channels = 8, .out_channels = 16, .padding = 1, .bias = false}));
  m->push_back(std::make_shared<BatchNorm2d>(16, 1e-5f, 0.1f, /*fuse_relu=*/true));
  m->push_back(std::make_shared<Flatten>());
  m->push_back(std::make_shared<Linear>(16 * 4 * 4, classes));
  return m;
}

// Plain SGD, written out here: the optimizers arrive with engine/optim.
void sgd_step(ExecutionContext& ctx, const std::vector<autograd::Variable>& params, float lr) {
  for (const auto& p : params) {
    Tensor value = p.value();
    backend::axpy(ctx, -lr, p.grad(), value);
  }
}

struct Batch {
  Tensor x, labels;
};

Batch random_batch(int n, int classes) {
  Generator g(11);
  Batch b{Tensor::empty({n, 1, 8, 8}), Tensor::empty({n}, DType::kI64)};
  float* x = b.x.data<float>();
  for (int64_t i = 0; i < b.x.numel(); ++i) x[i] = g.normal();
  int64_t* y = b.labels.data<int64_t>();
  for (int i = 0; i < n; ++i) y[i] = static_cast<int64_t>(g.below(static_cast<uint64_t>(classes)));
  return b;
}

double accuracy(const Tensor& logits, const Tensor& labels) {
  std::vector<float> z = logits.to_vector();
  int64_t n = logits.dim(0), k = logits.dim(1), correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < k; ++j) {
      if (z[static_cast<size_t>(i * k + j)] > z[static_cast<size_t>(i * k + best)]) best = j;
    }
    correct += best == labels.data<int64_t>()[i];
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

// One training step; returns the logits of the forward pass.
Tensor train_step(ExecutionContext& ctx, Module& model, const Batch& batch, float lr) {
  model.zero_grad();
  autograd::Variable logits = model.forward(ctx, autograd::Variable(batch.x));
  autograd::Variable loss = autograd::cross_entropy_loss(ctx, logits, batch.labels, 0.0f, batch.x.dim(0));
  loss.backward(&ctx);
  sgd_step(ctx, model.parameters(), lr);
  return logits.value();
}

TEST(Overfit, SmallCnnMemorises64RandomSamplesWithin200Steps) {
  init::manual_seed(5);
  const int classes = 10;
  auto model = small_cnn(classes);
  Batch batch = random_batch(64, classes);
  ExecutionContext ctx(Device::cpu(), 2);
  int step = 0;
  double acc = 0;
  for (; step < 200 && acc < 1.0; ++step) acc = accuracy(train_step(ctx, *model, batch, 0.1f), batch.labels);
  EXPECT_EQ(acc, 1.0) << "training accuracy after " << step << " steps";
  RecordProperty("steps_to_100_percent", step);
}

TEST(Overfit, WarmTrainingStepMakesNoSystemAllocation) {
  init::manual_seed(6);
  auto model = small_cnn(10);
  Batch batch = random_batch(16, 10);
  ExecutionContext ctx(Device::cpu(), 1);
  for (int i = 0; i < 3; ++i) train_step(ctx, *model, batch, 0.01f);
  int64_t before = allocator_for(Device::cpu()).stats().system_allocations;
  for (int i = 0; i < 5; ++i) train_step(ctx, *model, batch, 0.01f);
  EXPECT_EQ(allocator_for(Device::cpu()).stats().system_allocations, before);
}

}  // namespace
}  // namespace tandem::nn
