// The emulator itself, and the tensor-core helpers of cuda_mma.cuh (the real header, through the
// same mechanical rewrite as the kernels) one at a time: products through load_a, load_b_rows,
// load_b_cols_x2 (ldmatrix .trans) and a_from_c against plain products of the same bf16 values;
// cp.async's deferred mode making an early read visible, and its zero fill; shuffles; and the
// faults the emulator must stop at (so that the kernel tests would fail rather than pass quietly).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/backend/cuda/cuda_mma.cuh"
#include "tests/cuda_emul/emul_test_util.h"

namespace tandem::emul_test {
namespace {

namespace mma = backend::cuda::mma;
using bf16 = __nv_bfloat16;

constexpr int kPitch = 24;  // 16 columns + 8 of padding, as the kernels' tiles

float bf16_value(bf16 h) { return __bfloat162float(h); }

// Shared memory of the product kernel: A (16 x 16), M (16 rows, read as n by k or as k by n).
struct ProductShared {
  bf16 a[16 * kPitch];
  bf16 m[16 * kPitch];
};

// out (16 x 24): columns 0-7 A M[0:8]^T (load_b_rows), 8-23 A M (load_b_cols_x2, two n blocks),
// each lane writing its C fragment where the documented layout puts it.
void product_kernel(const bf16* a, const bf16* m, float* out) {
  auto& sh = *static_cast<ProductShared*>(tandem_emul::dynamic_shared(16));
  for (int e = static_cast<int>(threadIdx.x); e < 16 * 16; e += 32) {
    sh.a[e / 16 * kPitch + e % 16] = a[e];
    sh.m[e / 16 * kPitch + e % 16] = m[e];
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  uint32_t af[4], bt[2], bc[4];
  mma::load_a(af, sh.a, kPitch, 0, 0);
  mma::load_b_rows(bt, sh.m, kPitch, 0, 0);
  mma::load_b_cols_x2(bc, sh.m, kPitch, 0, 0);
  float c[3][4] = {};
  const uint32_t lo[2] = {bc[0], bc[1]}, hi[2] = {bc[2], bc[3]};
  mma::mma_16816(c[0], af, bt);
  mma::mma_16816(c[1], af, lo);
  mma::mma_16816(c[2], af, hi);
  for (int n = 0; n < 3; ++n) {
    for (int e = 0; e < 4; ++e) out[(g + 8 * (e / 2)) * 24 + 8 * n + 2 * t + e % 2] = c[n][e];
  }
}

std::vector<bf16> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<bf16> v(n);
  for (bf16& x : v) x = __float2bfloat16_rn(u(rng));
  return v;
}

TEST(CudaEmulatorTest, MmaHelpersComputeTheDocumentedProducts) {
  DeviceBuffer<bf16> a(256), m(256);
  DeviceBuffer<float> out(16 * 24, std::nanf(""));
  const std::vector<bf16> av = random_bf16(256, 1), mv = random_bf16(256, 2);
  std::copy(av.begin(), av.end(), a.data());
  std::copy(mv.begin(), mv.end(), m.data());
  tandem_emul::reset_counters();
  tandem_emul::launch(tandem_emul::LaunchConfig(1, 32, sizeof(ProductShared)), product_kernel,
                      static_cast<const bf16*>(a.data()), static_cast<const bf16*>(m.data()), out.data());
  EXPECT_EQ(tandem_emul::counters().mma, 3u);
  EXPECT_EQ(tandem_emul::counters().ldmatrix, 1u);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      double rows = 0.0;  // (A M^T)[i][j], M's row j
      for (int k = 0; k < 16; ++k) rows += double{bf16_value(av[i * 16 + k])} * bf16_value(mv[j * 16 + k]);
      EXPECT_NEAR(out.data()[i * 24 + j], rows, 1e-4) << "load_b_rows product at " << i << "," << j;
    }
    for (int j = 0; j < 16; ++j) {
      double cols = 0.0;  // (A M)[i][j]
      for (int k = 0; k < 16; ++k) cols += double{bf16_value(av[i * 16 + k])} * bf16_value(mv[k * 16 + j]);
      EXPECT_NEAR(out.data()[i * 24 + 8 + j], cols, 1e-4) << "load_b_cols_x2 product at " << i << "," << j;
    }
  }
}

// a_from_c: two C tiles (columns 0-7, 8-15) become the A operand of the next product; times the
// identity that must give back the C tiles rounded to bf16.
void a_from_c_kernel(const float* c_in, float* out) {
  auto* identity = static_cast<bf16*>(tandem_emul::dynamic_shared(16));
  for (int e = static_cast<int>(threadIdx.x); e < 16 * kPitch; e += 32) {
    identity[e] = __float2bfloat16_rn(e / kPitch == e % kPitch ? 1.0f : 0.0f);
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x), g = lane / 4, t = lane % 4;
  float lo[4], hi[4];
  for (int e = 0; e < 4; ++e) {
    lo[e] = c_in[(g + 8 * (e / 2)) * 16 + 2 * t + e % 2];
    hi[e] = c_in[(g + 8 * (e / 2)) * 16 + 8 + 2 * t + e % 2];
  }
  uint32_t a[4], b[4];
  mma::a_from_c(a, lo, hi);
  mma::load_b_cols_x2(b, identity, kPitch, 0, 0);
  float c[2][4] = {};
  const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
  mma::mma_16816(c[0], a, b_lo);
  mma::mma_16816(c[1], a, b_hi);
  for (int n = 0; n < 2; ++n) {
    for (int e = 0; e < 4; ++e) out[(g + 8 * (e / 2)) * 16 + 8 * n + 2 * t + e % 2] = c[n][e];
  }
}

TEST(CudaEmulatorTest, AccumulatorTilesFeedTheNextProduct) {
  DeviceBuffer<float> c(256), out(256, std::nanf(""));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (size_t e = 0; e < 256; ++e) c.data()[e] = u(rng);
  tandem_emul::launch(tandem_emul::LaunchConfig(1, 32, 16 * kPitch * sizeof(bf16)), a_from_c_kernel,
                      static_cast<const float*>(c.data()), out.data());
  for (size_t e = 0; e < 256; ++e) EXPECT_EQ(out.data()[e], bf16_round(c.data()[e])) << "element " << e;
}

// Reads its 16-byte chunk of shared memory before and after the wait of the copy that fills it.
void early_read_kernel(const float* src, float* before, float* after, int valid) {
  auto* tile = static_cast<float*>(tandem_emul::dynamic_shared(16));
  const int t = static_cast<int>(threadIdx.x);
  mma::copy_16(tile + 4 * t, src + 4 * t, valid != 0);
  mma::copy_commit();
  before[t] = tile[4 * t];  // the bug the deferred mode exists to show
  mma::copy_wait<0>();
  after[t] = tile[4 * t];
}

TEST(CudaEmulatorTest, DeferredCopiesMakeEarlyReadsVisible) {
  DeviceBuffer<float> src(128, 5.0f), before(32), after(32);
  const auto run = [&](tandem_emul::CopyMode mode, int valid) {
    tandem_emul::set_copy_mode(mode);
    tandem_emul::launch(tandem_emul::LaunchConfig(1, 32, 512), early_read_kernel, static_cast<const float*>(src.data()),
                        before.data(), after.data(), valid);
    tandem_emul::set_copy_mode(tandem_emul::CopyMode::kDeferred);
  };
  run(tandem_emul::CopyMode::kEager, 1);
  EXPECT_EQ(before.data()[7], 5.0f);
  EXPECT_EQ(after.data()[7], 5.0f);
  run(tandem_emul::CopyMode::kDeferred, 1);
  EXPECT_TRUE(std::isnan(before.data()[7])) << "a read before cp.async.wait_group must not see the data";
  EXPECT_EQ(after.data()[7], 5.0f);
  run(tandem_emul::CopyMode::kDeferred, 0);
  EXPECT_EQ(after.data()[7], 0.0f) << "src-size 0 zero-fills";
}

void shuffle_kernel(float* out) {
  const auto lane = static_cast<int>(threadIdx.x);
  out[lane] = __shfl_xor_sync(0xffffffffu, static_cast<float>(lane), 5);
  out[32 + lane] = __shfl_down_sync(0xffffffffu, static_cast<float>(lane), 3u);
}

TEST(CudaEmulatorTest, ShufflesExchangeAmongLanes) {
  DeviceBuffer<float> out(64);
  tandem_emul::launch(tandem_emul::LaunchConfig(1, 32), shuffle_kernel, out.data());
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(out.data()[l], static_cast<float>(l ^ 5));
    EXPECT_EQ(out.data()[32 + l], static_cast<float>(l + 3 < 32 ? l + 3 : l));
  }
}

// The faults a kernel bug would cause on a GPU stop the emulator too.
void diverged_kernel(float* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  __syncthreads();
}

void copy_kernel(const float* src, int offset) {
  auto* tile = static_cast<float*>(tandem_emul::dynamic_shared(16));
  mma::copy_16(tile, src + offset, true);
  mma::copy_commit();
  mma::copy_wait<0>();
}

void empty_kernel(int) {}

TEST(CudaEmulatorDeathTest, StopsAtKernelFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeviceBuffer<float> buffer(64);
  EXPECT_DEATH(tandem_emul::launch(tandem_emul::LaunchConfig(1, 32), diverged_kernel, buffer.data()),
               "some lanes wait at __syncthreads");
  EXPECT_DEATH(tandem_emul::launch(tandem_emul::LaunchConfig(1, 32, 64), copy_kernel,
                                   static_cast<const float*>(buffer.data()), 1),
               "not aligned");
  EXPECT_DEATH(tandem_emul::launch(tandem_emul::LaunchConfig(1, 32, 64 * 1024), empty_kernel, 0), "48 KiB");
  alignas(16) static const float unregistered[8] = {};
  EXPECT_DEATH(tandem_emul::launch(tandem_emul::LaunchConfig(1, 32, 64), copy_kernel, unregistered, 0),
               "outside every registered allocation");
}

}  // namespace
}  // namespace tandem::emul_test
