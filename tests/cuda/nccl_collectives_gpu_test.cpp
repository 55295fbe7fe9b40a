// The plugin's NCCL collectives, driven as engine/distribute drives them: one thread per device,
// each calling with its own rank. Skips, saying why, where there is no driver or GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/backend/plugin_abi.h"
#include "engine/backend/plugin_loader.h"
#include "engine/core/device.h"
#include "engine/core/tensor.h"
#include "tests/cuda/cuda_test_util.h"

namespace tandem {
namespace {

std::unique_ptr<backend::DeviceCollectives> create_collectives(int count) {
  std::string why;
  auto create = backend::cuda_plugin_function<TandemNcclCreate>(kTandemNcclEntry, &why);
  EXPECT_NE(create, nullptr) << why;
  if (create == nullptr) return nullptr;
  std::vector<int> devices;
  for (int d = 0; d < count; ++d) devices.push_back(d);
  backend::DeviceCollectives* out = nullptr;
  char error[512] = {};
  int rc = create(kTandemNcclAbi, devices.data(), count, &out, error, sizeof(error));
  EXPECT_EQ(rc, 0) << error;
  return std::unique_ptr<backend::DeviceCollectives>(out);
}

TEST(NcclCollectives, AllReduceBroadcastAndAllGatherOnEveryDevice) {
  TANDEM_REQUIRE_GPU();
  const int ranks = device_services(DeviceType::kCuda).device_count();
  auto nccl = create_collectives(ranks);
  ASSERT_NE(nccl, nullptr);
  const int64_t n = 1001;
  std::vector<std::vector<float>> reduced(static_cast<size_t>(ranks)), gathered(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      Tensor x = Tensor::from_vector(std::vector<float>(static_cast<size_t>(n), static_cast<float>(r + 1)), Shape({n}))
                     .to(Device::cuda(r));
      Tensor all = Tensor::empty({ranks, n}, DType::kF32, Device::cuda(r));
      nccl->all_reduce(r, x.data<float>(), static_cast<size_t>(n), DType::kF32, /*average=*/false);
      nccl->all_gather(r, x.raw_data(), all.raw_data(), x.nbytes());
      nccl->stream(r).synchronize();
      reduced[static_cast<size_t>(r)] = x.to(Device::cpu()).to_vector();
      gathered[static_cast<size_t>(r)] = all.to(Device::cpu()).to_vector();
      EXPECT_EQ(nccl->async_error(r), "");
    });
  }
  for (auto& t : threads) t.join();
  const float sum = static_cast<float>(ranks * (ranks + 1) / 2);
  for (int r = 0; r < ranks; ++r) {
    for (float v : reduced[static_cast<size_t>(r)]) ASSERT_EQ(v, sum);
    for (float v : gathered[static_cast<size_t>(r)]) ASSERT_EQ(v, sum);
  }
}

// distribute.allreduce_dtype: bf16: small integers, exact in bf16, sum to the exact bf16 value on
// every device; an average is that sum divided once (not NCCL's ncclAvg, which pre-multiplies by
// bf16(1/n)). Other element types are refused before NCCL sees them. With one GPU the sum is the
// identity and only the element type's acceptance and the division are proved.
TEST(NcclCollectives, AllReducesBf16) {
  TANDEM_REQUIRE_GPU();
  const int ranks = device_services(DeviceType::kCuda).device_count();
  auto nccl = create_collectives(ranks);
  ASSERT_NE(nccl, nullptr);
  const int64_t n = 1001;
  std::vector<std::vector<uint16_t>> sums(static_cast<size_t>(ranks)), means(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<BFloat16> own(static_cast<size_t>(n), float_to_bf16(static_cast<float>(r + 1)));
      Tensor x = Tensor::empty({n}, DType::kBF16), y = Tensor::empty({n}, DType::kBF16);
      std::memcpy(x.raw_data(), own.data(), x.nbytes());
      std::memcpy(y.raw_data(), own.data(), y.nbytes());
      x = x.to(Device::cuda(r));
      y = y.to(Device::cuda(r));
      nccl->all_reduce(r, x.raw_data(), static_cast<size_t>(n), DType::kBF16, /*average=*/false);
      nccl->all_reduce(r, y.raw_data(), static_cast<size_t>(n), DType::kBF16, /*average=*/true);
      nccl->stream(r).synchronize();
      for (auto [t, out] : {std::pair{&x, &sums}, std::pair{&y, &means}}) {
        Tensor host = t->to(Device::cpu());
        const auto* bits = static_cast<const uint16_t*>(host.raw_data());
        (*out)[static_cast<size_t>(r)].assign(bits, bits + n);
      }
      EXPECT_EQ(nccl->async_error(r), "");
    });
  }
  for (auto& t : threads) t.join();
  const float sum = static_cast<float>(ranks * (ranks + 1) / 2);
  for (int r = 0; r < ranks; ++r) {
    for (uint16_t v : sums[static_cast<size_t>(r)]) ASSERT_EQ(v, float_to_bf16(sum).bits);
    for (uint16_t v : means[static_cast<size_t>(r)]) ASSERT_EQ(v, float_to_bf16(sum / static_cast<float>(ranks)).bits);
  }
  EXPECT_THROW(nccl->all_reduce(0, nullptr, 0, DType::kI32, false), Error);
}

TEST(NcclCollectives, BadRankIsAnError) {
  TANDEM_REQUIRE_GPU();
  auto nccl = create_collectives(1);
  ASSERT_NE(nccl, nullptr);
  EXPECT_THROW(nccl->stream(1), Error);
  EXPECT_THROW(nccl->all_reduce(-1, nullptr, 0, DType::kF32, false), Error);
}

}  // namespace
}  // namespace tandem
