// Replicas identical: broadcast makes every replica equal to replica 0 (parameters and buffers),
// and the checksum catches a one-bit difference and names the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/backend/ops.h"
#include "engine/distribute/cpu_communicator.h"
#include "engine/distribute/replica_sync.h"
#include "engine/nn/init.h"
#include "engine/nn/layers.h"
#include "tests/distribute/distribute_test_util.h"

namespace tandem::distribute {
namespace {

using namespace std::chrono_literals;
using testing::caught;
using testing::expect_no_errors;
using testing::run_ranks;

std::shared_ptr<nn::Sequential> cnn() {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions{.in_channels = 3, .out_channels = 8, .bias = false}));
  m->push_back(std::make_shared<nn::BatchNorm2d>(8));
  m->push_back(std::make_shared<nn::Flatten>());
  m->push_back(std::make_shared<nn::Linear>(8, 5));
  return m;
}

// Differently initialised replicas, buffers included.
std::vector<std::shared_ptr<nn::Sequential>> different_replicas(int ranks) {
  std::vector<std::shared_ptr<nn::Sequential>> models;
  for (int r = 0; r < ranks; ++r) {
    nn::init::manual_seed(static_cast<uint64_t>(r + 1));
    models.push_back(cnn());
    for (auto& [name, t] : models.back()->named_buffers()) {
      if (t->dtype() == DType::kF32) t->data<float>()[0] = static_cast<float>(r + 10);
    }
  }
  return models;
}

TEST(ReplicaSync, BroadcastMakesEveryReplicaEqualToReplicaZero) {
  const int ranks = 3;
  auto models = different_replicas(ranks);
  auto root_sums = parameter_checksums(*models[0]);
  ASSERT_NE(root_sums, parameter_checksums(*models[1]));
  CpuCommunicatorGroup group(ranks, CommunicatorOptions{20s});
  expect_no_errors(run_ranks(ranks, [&](int r) {
    broadcast_parameters(group.communicator(r), *models[static_cast<size_t>(r)]);
    verify_parameters(group.communicator(r), *models[static_cast<size_t>(r)]);
  }));
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(parameter_checksums(*models[static_cast<size_t>(r)]), root_sums);
  EXPECT_EQ(root_sums.back().first, "1.num_batches_tracked");  // buffers follow the parameters
}

// A bf16 shadow rounded from a replica's own initial weights must not outlive the broadcast that
// replaces them (backend::bf16_weight would otherwise hand replica 1 its old weights in bf16).
TEST(ReplicaSync, BroadcastMakesTheBf16ShadowsOfTheReplicasStale) {
  const int ranks = 2;
  auto models = different_replicas(ranks);
  KernelOptions bf16;
  bf16.precision = Precision::kBf16;
  ExecutionContext ctx(Device::cpu(), 1, 0, bf16);
  std::vector<Tensor> weights;
  for (auto& m : models) {
    for (auto& [name, p] : m->named_parameters()) {
      if (name == "3.weight") weights.push_back(p.value());
    }
    ASSERT_EQ(weights.size(), static_cast<size_t>(&m - &models[0] + 1));
    backend::bf16_weight(ctx, weights.back());
    ASSERT_TRUE(weights.back().bf16_shadow_current());
  }
  CpuCommunicatorGroup group(ranks, CommunicatorOptions{20s});
  expect_no_errors(run_ranks(ranks, [&](int r) {
    broadcast_parameters(group.communicator(r), *models[static_cast<size_t>(r)]);
  }));
  EXPECT_FALSE(weights[1].bf16_shadow_current());
  Tensor widened1 = Tensor::empty(weights[1].shape()), widened0 = Tensor::empty(weights[0].shape());
  backend::widen_from_bf16(ctx, backend::bf16_weight(ctx, weights[1]), widened1);
  backend::widen_from_bf16(ctx, backend::bf16_weight(ctx, weights[0]), widened0);
  EXPECT_EQ(widened1.to_vector(), widened0.to_vector());
}

TEST(ReplicaSync, ChecksumCatchesOneBitAndNamesTheTensor) {
  const int ranks = 3;
  auto models = different_replicas(ranks);
  CpuCommunicatorGroup group(ranks, CommunicatorOptions{20s});
  auto errors = run_ranks(ranks, [&](int r) {
    auto& model = *models[static_cast<size_t>(r)];
    broadcast_parameters(group.communicator(r), model);
    group.communicator(r).set_step(40);
    if (r == 2) {  // flip the lowest bit of one element of one tensor
      float* w = model.named_parameters()[3].second.value().data<float>();
      uint32_t bits;
      std::memcpy(&bits, w + 7, 4);
      bits ^= 1u;
      std::memcpy(w + 7, &bits, 4);
    }
    verify_parameters(group.communicator(r), model);
  });
  ASSERT_EQ(models[0]->named_parameters()[3].first, "3.weight");
  for (int r = 0; r < ranks; ++r) {
    auto e = caught(errors[static_cast<size_t>(r)]);
    EXPECT_EQ(e.code, ErrorCode::kFailedPrecondition) << e.message;
    EXPECT_NE(e.message.find("3.weight is not bitwise equal"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("replica 2 has"), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find("replica 1 has"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("at step 40"), std::string::npos) << e.message;
  }
}

TEST(ReplicaSync, ChecksumSeesEveryBit) {
  Tensor x = Tensor::zeros({33});
  uint64_t base = tensor_checksum(x);
  auto* bytes = static_cast<unsigned char*>(x.raw_data());
  for (size_t i = 0; i < x.nbytes(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes[i] ^= static_cast<unsigned char>(1 << bit);
      EXPECT_NE(tensor_checksum(x), base) << "byte " << i << " bit " << bit;
      bytes[i] ^= static_cast<unsigned char>(1 << bit);
    }
  }
  EXPECT_EQ(tensor_checksum(x), base);
}

}  // namespace
}  // namespace tandem::distribute
