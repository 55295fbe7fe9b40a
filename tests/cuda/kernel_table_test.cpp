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
  // to_bf16 and from_bf16 are capabilities, not ops: null on CUDA, whose convolutions round their
  // operands into their own bf16 staging copies (cuda_conv.cpp), so autograd hands them f32, and
  // whose activations stay f32 between ops.
  const size_t operands = offsetof(KernelTable, to_bf16) / sizeof(void (*)());
  const size_t activations = offsetof(KernelTable, from_bf16) / sizeof(void (*)());
  EXPECT_EQ(filled[operands], nullptr) << "CUDA fills to_bf16: its convolutions must then take bf16 operands";
  EXPECT_EQ(filled[activations], nullptr) << "CUDA fills from_bf16: its batch norms must then write bf16";
  for (size_t i = 0; i < kEntries; ++i) {
    if (i == operands || i == activations) continue;
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
