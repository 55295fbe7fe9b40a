// The bucketed reducer on real replica threads: DDP's layout (reverse order, small first
// bucket), reduced gradients equal to the rank-order sum (or average) of every replica's own
// gradients, parameters without a gradient reduced as zeros (no hang), and accumulation over
// several backward passes with reducing off.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/autograd/ops.h"
#include "engine/distribute/cpu_communicator.h"
#include "engine/distribute/gradient_bucketer.h"
#include "engine/nn/init.h"
#include "engine/nn/layers.h"
#include "tests/distribute/distribute_test_util.h"

namespace tandem::distribute {
namespace {

using namespace std::chrono_literals;
using testing::caught;
using testing::expect_no_errors;
using testing::run_ranks;

TEST(PlanBuckets, ReverseOrderWithASmallFirstBucketAsDDP) {
  // floats: 0.4 MB, 0.8 MB, 1.2 MB, 8 MB, 20 MB, exactly 1 MiB, 40 B
  std::vector<int64_t> numel = {100000, 200000, 300000, 2000000, 5000000, 262144, 10};
  auto buckets = plan_buckets(numel, BucketOptions{});
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].params, (std::vector<int>{6, 5}));  // closes once it reaches 1 MiB
  EXPECT_EQ(buckets[0].offsets, (std::vector<int64_t>{0, 10}));
  EXPECT_EQ(buckets[0].numel, 262154);
  EXPECT_EQ(buckets[1].params, (std::vector<int>{4, 3}));  // 28 MB >= 25 MiB closes it
  EXPECT_EQ(buckets[1].offsets, (std::vector<int64_t>{0, 5000000}));
  EXPECT_EQ(buckets[2].params, (std::vector<int>{2, 1, 0}));  // the rest
  EXPECT_EQ(buckets[2].offsets, (std::vector<int64_t>{0, 300000, 500000}));
  EXPECT_EQ(buckets[2].numel, 600000);
  EXPECT_THROW(plan_buckets(numel, BucketOptions{.first_bucket_bytes = 0}), Error);
}

std::shared_ptr<nn::Sequential> mlp() {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(64, 128));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(128, 10));
  return m;
}

// R replicas built from the same seed: identical weights, as after broadcast_parameters.
std::vector<std::shared_ptr<nn::Sequential>> replicas(int ranks) {
  std::vector<std::shared_ptr<nn::Sequential>> models;
  for (int r = 0; r < ranks; ++r) {
    nn::init::manual_seed(7);
    models.push_back(mlp());
  }
  return models;
}

const BucketOptions kSmallBuckets{.first_bucket_bytes = 1000, .bucket_bytes = 20000};

TEST(GradientBucketer, LayoutOfAModelFollowsItsParameters) {
  CpuCommunicatorGroup group(1);
  ExecutionContext ctx(Device::cpu(), 1);
  auto model = mlp();
  GradientBucketer bucketer(group.communicator(0), ctx, model->named_parameters(), kSmallBuckets);
  const auto& b = bucketer.buckets();
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].params, (std::vector<int>{3, 2}));  // 2.bias then 2.weight: 5160 B >= 1000
  EXPECT_EQ(b[1].params, (std::vector<int>{1, 0}));
  EXPECT_EQ(bucketer.parameter_name(3), "2.bias");
  EXPECT_EQ(bucketer.parameter_name(0), "0.weight");
  EXPECT_EQ(b[1].numel, 128 + 128 * 64);
}

Tensor rank_input(int rank, int step) {
  Generator g(static_cast<uint64_t>(100 * rank + step));
  Tensor x = Tensor::empty({5, 64});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = g.normal();
  return x;
}

float to_bf16_and_back(float x) { return bf16_to_float(float_to_bf16(x)); }

// wire kBF16: each replica's gradient rounded to bf16, summed in f32 in rank order, rounded once.
void check_reduction(int ranks, ReduceOp op, DType wire = DType::kF32) {
  CpuCommunicatorGroup group(ranks, CommunicatorOptions{20s});
  auto models = replicas(ranks);
  constexpr int kSteps = 3;
  // [step][rank][param]: each replica's own gradient, and what finish() gave it.
  std::vector<std::vector<std::vector<std::vector<float>>>> own(kSteps), reduced(kSteps);
  for (int s = 0; s < kSteps; ++s) own[s].resize(ranks), reduced[s].resize(ranks);
  expect_no_errors(run_ranks(ranks, [&](int r) {
    ExecutionContext ctx(Device::cpu(), 1);
    auto& model = *models[static_cast<size_t>(r)];
    GradientBucketer bucketer(group.communicator(r), ctx, model.named_parameters(),
                              BucketOptions{.first_bucket_bytes = 1000, .bucket_bytes = 20000, .op = op,
                                            .wire_dtype = wire});
    for (int s = 0; s < kSteps; ++s) {
      group.communicator(r).set_step(s);
      model.zero_grad();
      auto y = model(ctx, autograd::Variable(rank_input(r, s)));
      autograd::sum(ctx, autograd::mul(ctx, y, y)).backward(&ctx);
      for (auto& p : model.parameters()) own[s][r].push_back(p.grad().to_vector());
      bucketer.finish();
      for (auto& p : model.parameters()) reduced[s][r].push_back(p.grad().to_vector());
    }
  }));
  for (int s = 0; s < kSteps; ++s) {
    for (size_t p = 0; p < own[s][0].size(); ++p) {
      const bool bf16 = wire == DType::kBF16;
      auto sent = [&](int r, size_t i) { return bf16 ? to_bf16_and_back(own[s][r][p][i]) : own[s][r][p][i]; };
      std::vector<float> expected(own[s][0][p].size());
      for (size_t i = 0; i < expected.size(); ++i) expected[i] = sent(0, i);
      for (int r = 1; r < ranks; ++r) {
        for (size_t i = 0; i < expected.size(); ++i) expected[i] += sent(r, i);
      }
      if (op == ReduceOp::kAverage) {
        for (auto& v : expected) v /= static_cast<float>(ranks);
      }
      if (bf16) {
        for (auto& v : expected) v = to_bf16_and_back(v);
      }
      for (int r = 0; r < ranks; ++r) {
        ASSERT_EQ(0, std::memcmp(expected.data(), reduced[s][r][p].data(), expected.size() * sizeof(float)))
            << "step " << s << " rank " << r << " param " << p;
      }
    }
  }
}

TEST(GradientBucketer, HandsOverEachBucketInLaunchOrderAsItCompletes) {
  const int ranks = 2;
  CpuCommunicatorGroup group(ranks, CommunicatorOptions{20s});
  auto models = replicas(ranks);
  std::vector<std::vector<std::vector<int>>> seen(ranks);
  expect_no_errors(run_ranks(ranks, [&](int r) {
    ExecutionContext ctx(Device::cpu(), 1);
    auto& model = *models[static_cast<size_t>(r)];
    GradientBucketer bucketer(group.communicator(r), ctx, model.named_parameters(), kSmallBuckets);
    auto params = model.parameters();
    auto y = model(ctx, autograd::Variable(rank_input(r, 0)));
    autograd::sum(ctx, y).backward(&ctx);
    std::vector<float> own_last = params.back().grad().to_vector();
    bucketer.finish([&](const std::vector<int>& indices) {
      seen[static_cast<size_t>(r)].push_back(indices);
      if (indices.front() == 3) {  // the first bucket: its gradient is already the reduced one
        EXPECT_NE(params[3].grad().to_vector(), own_last);
      }
    });
  }));
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(seen[static_cast<size_t>(r)], (std::vector<std::vector<int>>{{3, 2}, {1, 0}})) << "rank " << r;
  }
}

TEST(GradientBucketer, SumsEveryReplicasGradientsInRankOrder) { check_reduction(3, ReduceOp::kSum); }
TEST(GradientBucketer, AveragesWhenAsked) { check_reduction(2, ReduceOp::kAverage); }
TEST(GradientBucketer, InBf16SumsTheRoundedGradientsInF32AndRoundsOnce) {
  check_reduction(3, ReduceOp::kSum, DType::kBF16);
  check_reduction(2, ReduceOp::kAverage, DType::kBF16);
}
TEST(GradientBucketer, OnlyF32AndBf16GoOnTheWire) {
  CpuCommunicatorGroup group(1);
  ExecutionContext ctx(Device::cpu(), 1);
  auto model = mlp();
  try {
    GradientBucketer bucketer(group.communicator(0), ctx, model->named_parameters(),
                              BucketOptions{.wire_dtype = DType::kF16});
    FAIL() << "f16 on the wire was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in f32 or in bf16; got f16"), std::string::npos)
        << e.what();
  }
}
TEST(GradientBucketer, OneReplicaKeepsItsGradients) { check_reduction(1, ReduceOp::kSum); }

// Uses `extra` only when told: a parameter that gets no gradient on some replica.
class TwoHeads : public nn::Module {
 public:
  explicit TwoHeads(bool use_extra) : use_extra_(use_extra) {
    body_ = register_module("body", std::make_shared<nn::Linear>(8, 4));
    extra_ = register_module("extra", std::make_shared<nn::Linear>(4, 4));
  }
  autograd::Variable forward(ExecutionContext& ctx, const autograd::Variable& x) override {
    auto y = (*body_)(ctx, x);
    return use_extra_ ? (*extra_)(ctx, y) : y;
  }

 private:
  bool use_extra_;
  std::shared_ptr<nn::Linear> body_, extra_;
};

// Each replica's reduced gradient of extra.weight after one step; errors in errors.
std::vector<std::vector<float>> run_two_heads(int ranks, const std::function<bool(int)>& uses_extra,
                                              std::vector<std::exception_ptr>& errors) {
  CpuCommunicatorGroup group(ranks, CommunicatorOptions{20s});
  std::vector<std::vector<float>> extra_grads(static_cast<size_t>(ranks));
  auto start = std::chrono::steady_clock::now();
  errors = run_ranks(ranks, [&](int r) {
    ExecutionContext ctx(Device::cpu(), 1);
    nn::init::manual_seed(1);
    TwoHeads model(uses_extra(r));
    GradientBucketer bucketer(group.communicator(r), ctx, model.named_parameters(), kSmallBuckets);
    auto y = model(ctx, autograd::Variable(Tensor::from_vector(std::vector<float>(16, 1.0f), {2, 8})));
    autograd::sum(ctx, y).backward(&ctx);
    bucketer.finish();
    for (auto& [name, p] : model.named_parameters()) {
      if (name == "extra.weight") extra_grads[static_cast<size_t>(r)] = p.grad().to_vector();
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "must not wait for the watchdog";
  return extra_grads;
}

// A parameter unused in the forward pass gets zeros, reduced with its bucket: no replica waits for
// a bucket that never comes, and every replica ends with the same gradient.
TEST(GradientBucketer, AnUnusedParameterGetsZerosAndNothingHangs) {
  std::vector<std::exception_ptr> errors;
  auto grads = run_two_heads(2, [](int) { return false; }, errors);
  for (auto& error : errors) EXPECT_FALSE(caught(error).thrown) << caught(error).message;
  for (auto& g : grads) EXPECT_EQ(g, std::vector<float>(16, 0.0f));
}

TEST(GradientBucketer, AParameterUnusedOnOneReplicaSumsTheOthersGradients) {
  std::vector<std::exception_ptr> errors;
  auto grads = run_two_heads(3, [](int r) { return r != 1; }, errors);
  for (auto& error : errors) EXPECT_FALSE(caught(error).thrown) << caught(error).message;
  std::vector<std::exception_ptr> single_errors;
  auto single = run_two_heads(1, [](int) { return true; }, single_errors);
  ASSERT_EQ(single[0].size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_FLOAT_EQ(grads[0][i], 2 * single[0][i]) << i;  // replicas 0 and 2 used it, 1 added zeros
  }
  EXPECT_EQ(grads[0], grads[1]);
  EXPECT_EQ(grads[0], grads[2]);
}

// With reducing off, gradients add up over backward passes and only the last one is reduced.
TEST(GradientBucketer, AccumulatesUntilReducingIsOnAgain) {
  CpuCommunicatorGroup group(2, CommunicatorOptions{20s});
  std::vector<std::vector<float>> got(2);
  auto errors = run_ranks(2, [&](int r) {
    ExecutionContext ctx(Device::cpu(), 1);
    nn::init::manual_seed(2);
    nn::Linear model(3, 2);
    GradientBucketer bucketer(group.communicator(r), ctx, model.named_parameters(), kSmallBuckets);
    for (int micro = 0; micro < 3; ++micro) {
      bucketer.set_reducing(micro == 2);
      Tensor x = Tensor::from_vector({1.0f + micro + r, 2.0f, -1.0f}, {1, 3});
      autograd::sum(ctx, model(ctx, autograd::Variable(x))).backward(&ctx);
    }
    bucketer.finish();
    got[static_cast<size_t>(r)] = model.named_parameters().front().second.grad().to_vector();
  });
  for (auto& error : errors) EXPECT_FALSE(caught(error).thrown) << caught(error).message;
  // d(sum)/dW row = x: summed over 3 micro-batches and 2 replicas: first column 1+2+3 + 2+3+4 = 15.
  EXPECT_EQ(got[0], (std::vector<float>{15, 12, -6, 15, 12, -6}));
  EXPECT_EQ(got[1], got[0]);
}

TEST(GradientBucketer, RejectsParametersItCannotReduce) {
  CpuCommunicatorGroup group(1);
  ExecutionContext ctx(Device::cpu(), 1);
  autograd::Variable frozen(Tensor::zeros({3}), /*requires_grad=*/false, "frozen");
  EXPECT_THROW(GradientBucketer(group.communicator(0), ctx, {{"frozen", frozen}}), Error);
}

}  // namespace
}  // namespace tandem::distribute
