// The CUDA factories against the CPU's: a GPU and a CPU context seeded alike draw the same rand
// values bit for bit and randn's within an ulp of their libm; arange and full give the same values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/factories.h"
#include "tests/cuda/cuda_test_util.h"

namespace tandem::backend {
namespace {

const Device kGpu = Device::cuda(0);

template <typename T>
std::vector<T> host_values(const Tensor& t) {
  Tensor h = t.to(Device::cpu());
  std::vector<T> out(static_cast<size_t>(h.numel()));
  std::memcpy(out.data(), h.raw_data(), h.nbytes());
  return out;
}

TEST(FactoriesGpu, RandIsTheCpusBitsAndRandnWithinAnUlp) {
  TANDEM_REQUIRE_GPU();
  ExecutionContext cpu(Device::cpu(), 0, 77), gpu(kGpu, 0, 77);
  const Shape shape{1000, 257};  // odd: no launch geometry divides it
  EXPECT_EQ(host_values<float>(rand(gpu, shape)), host_values<float>(rand(cpu, shape)));
  std::vector<float> g = host_values<float>(randn(gpu, shape)), c = host_values<float>(randn(cpu, shape));
  ASSERT_EQ(g.size(), c.size());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], c[i], 1e-6f * (1.0f + std::abs(c[i]))) << i;
}

TEST(FactoriesGpu, ArangeAndFullAreTheCpusValuesInEachDtype) {
  TANDEM_REQUIRE_GPU();
  ExecutionContext cpu, gpu(kGpu);
  EXPECT_EQ(host_values<int64_t>(arange(gpu, 3, 100003, 7)), host_values<int64_t>(arange(cpu, 3, 100003, 7)));
  std::vector<float> g = host_values<float>(arange(gpu, -1, 1, 1e-4)), c = host_values<float>(arange(cpu, -1, 1, 1e-4));
  ASSERT_EQ(g.size(), c.size());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_FLOAT_EQ(g[i], c[i]) << i;
  EXPECT_EQ(host_values<uint16_t>(arange(gpu, 0, 50, 0.37, DType::kBF16)),
            host_values<uint16_t>(arange(cpu, 0, 50, 0.37, DType::kBF16)));
  EXPECT_EQ(host_values<float>(full(gpu, {33, 65}, 0.1)), host_values<float>(full(cpu, {33, 65}, 0.1)));
  EXPECT_EQ(host_values<int64_t>(ones(gpu, {129}, DType::kI64)), std::vector<int64_t>(129, 1));
}

}  // namespace
}  // namespace tandem::backend
