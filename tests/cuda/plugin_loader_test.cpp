// The CUDA plugin loader on any machine: it never throws, finds the plugin this tree built,
// and says why CUDA is off when it is (here: no driver). Runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "engine/backend/plugin_abi.h"
#include "engine/backend/plugin_loader.h"
#include "engine/backend/shared_library.h"
#include "engine/core/device.h"

namespace tandem::backend {
namespace {

TEST(CudaPluginLoader, SearchesTheBuildTreeAndTheLoaderPath) {
  if (std::getenv("TANDEM_CUDA_PLUGIN") != nullptr) GTEST_SKIP() << "TANDEM_CUDA_PLUGIN is set";
  auto candidates = cuda_plugin_candidates();
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates.back(), "libtandem_cuda.so");  // the system loader's search comes last
  // Relative to this test's folder (build/tests) the build tree's plugin is ../engine/backend/cuda.
  EXPECT_TRUE(std::any_of(candidates.begin(), candidates.end(), [](const std::string& c) {
    return c.ends_with("engine/backend/cuda/libtandem_cuda.so");
  }));
}

TEST(CudaPluginLoader, StatusExplainsItselfAndMatchesTheRegistry) {
  const CudaPluginStatus& status = load_cuda_plugin();
  EXPECT_EQ(&status, &load_cuda_plugin());  // loaded once per process
  EXPECT_EQ(status.loaded, has_device_services(DeviceType::kCuda));
  if (status.loaded) {
    EXPECT_GT(status.device_count, 0);
    return;
  }
  EXPECT_FALSE(status.error.empty());
  EXPECT_FALSE(status.attempts.empty());
  EXPECT_NE(status.error.find("libtandem_cuda.so"), std::string::npos) << status.error;
  SharedLibrary driver("libcuda.so.1");
  std::error_code ec;
  bool built = std::filesystem::exists(TANDEM_BINARY_DIR "/engine/backend/cuda/libtandem_cuda.so", ec);
  if (built && !driver.loaded()) {
    // The plugin itself loads; cudart then finds no driver, and the status says so.
    EXPECT_NE(status.error.find("libtandem_cuda.so loaded, but CUDA is not usable"), std::string::npos)
        << status.error;
    EXPECT_NE(status.error.find("cudaGetDeviceCount"), std::string::npos) << status.error;
  }
}

// Entry points beyond the first come through the loader's own handle: without a loaded plugin
// the answer is the load's error, with one the entry points it exports and dlerror's words.
TEST(CudaPluginLoader, FurtherEntryPointsComeFromTheLoadedPlugin) {
  const CudaPluginStatus& status = load_cuda_plugin();
  std::string why;
  void* nccl = cuda_plugin_symbol(kTandemNcclEntry, &why);
  if (!status.loaded) {
    EXPECT_EQ(nccl, nullptr);
    EXPECT_EQ(why, status.error);
    return;
  }
  EXPECT_NE(nccl, nullptr) << why;
  EXPECT_NE(cuda_plugin_function<TandemNcclCreate>(kTandemNcclEntry, &why), nullptr) << why;
  // Several processes: process 0's unique id, and each process's ranks of one communicator.
  EXPECT_NE(cuda_plugin_function<TandemNcclUniqueId>(kTandemNcclUniqueIdEntry, &why), nullptr) << why;
  EXPECT_NE(cuda_plugin_function<TandemNcclCreateRanks>(kTandemNcclCreateRanksEntry, &why), nullptr) << why;
  EXPECT_EQ(cuda_plugin_symbol("tandem_no_such_entry", &why), nullptr);
  EXPECT_NE(why.find("tandem_no_such_entry"), std::string::npos) << why;
}

}  // namespace
}  // namespace tandem::backend
