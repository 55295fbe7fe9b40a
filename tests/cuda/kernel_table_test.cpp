// No op can be forgotten on CUDA: the plugin's kernel table, read without touching the driver (so
// this runs on machines with the toolkit but no GPU, like CI), has every entry filled.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "engine/backend/doctor/cuda_build_info.h"
#include "engine/backend/kernels.h"
#include "engine/backend/plugin_abi.h"
#include "engine/backend/shared_library.h"

namespace tandem::backend {
namespace {

// KernelTable is a plain struct of function pointers: read it as an array of them.
constexpr size_t kEntries = sizeof(KernelTable) / sizeof(void (*)());
static_assert(std::is_standard_layout_v<KernelTable> && sizeof(KernelTable) % sizeof(void (*)()) == 0);

std::array<void (*)(), kEntries> entries(const KernelTable& table) {
  std::array<void (*)(), kEntries> out{};
  std::memcpy(out.data(), &table, sizeof(KernelTable));
  return out;
}

TEST(CudaKernelTable, EveryEntryIsFilled) {
  if (!build_info::kCudaBuilt) GTEST_SKIP() << "this build has no CUDA plugin (no toolkit at configure time)";
  SharedLibrary plugin(build_info::kCudaPluginBuildPath);
  ASSERT_TRUE(plugin.loaded()) << plugin.error();
  using TableFn = const KernelTable* (*)();
  auto table_fn = plugin.function<TableFn>(kTandemCudaKernelTableEntry);
  ASSERT_NE(table_fn, nullptr) << plugin.error();
  const KernelTable* table = table_fn();
  ASSERT_NE(table, nullptr);
  auto filled = entries(*table);
  // to_bf16 and from_bf16 included: CUDA's convolutions take bf16 operands and its batch norms
  // write bf16 activations (tests/cuda/bf16_activations_gpu_test.cpp holds them to the CPU).
  for (size_t i = 0; i < kEntries; ++i) {
    EXPECT_NE(filled[i], nullptr) << "KernelTable entry #" << i
                                  << " (in declaration order of engine/backend/kernels.h) is null on CUDA";
  }
}

TEST(CudaKernelTable, TheCheckSeesAMissingEntry) {
  // The same reading applied to an empty table finds every entry missing, so the test above can fail.
  KernelTable empty;
  auto filled = entries(empty);
  for (auto fn : filled) EXPECT_EQ(fn, nullptr);
  EXPECT_GE(kEntries, 31u);
}

}  // namespace
}  // namespace tandem::backend
