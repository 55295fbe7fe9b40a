// GpuMonitor against the stand-in libnvidia-ml.so.1 of tests/doctor/fakes (two GPUs whose numbers
// follow their index: 35% / 85% busy, 1.5 / 3 GiB of 80 GiB used, 120.25 / 420.25 W, PCI buses
// 0x17 / 0x65), the CUDA-to-NVML map, and the idle-GPU verdict.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include "engine/backend/doctor/nvml.h"

namespace tandem::backend {
namespace {

GpuMonitorOptions fake(std::optional<std::string> visible = std::nullopt) {
  GpuMonitorOptions options;
  options.library = TANDEM_DOCTOR_FAKES "/ready_2gpu/libnvidia-ml.so.1";
  options.cuda_visible_devices = std::move(visible);
  return options;
}

std::unique_ptr<GpuMonitor> open_fake(const GpuMonitorOptions& options) {
  std::string why;
  auto monitor = GpuMonitor::open(&why, options);
  EXPECT_NE(monitor, nullptr) << why;
  return monitor;
}

TEST(GpuMonitor, SamplesEachGpusUtilisationMemoryAndPower) {
  auto monitor = open_fake(fake());
  ASSERT_NE(monitor, nullptr);
  EXPECT_EQ(monitor->nvml_device_count(), 2);
  EXPECT_EQ(monitor->driver_version(), "580.65.06");
  std::vector<GpuSample> s = monitor->sample({0, 1});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].index, 0);
  EXPECT_EQ(s[0].nvml_index, 0);
  EXPECT_DOUBLE_EQ(s[0].utilization_percent, 35.0);
  EXPECT_DOUBLE_EQ(s[0].memory_used_mb, 1536.0);
  EXPECT_DOUBLE_EQ(s[0].memory_total_mb, 81920.0);
  EXPECT_DOUBLE_EQ(s[0].power_watts, 120.25);
  EXPECT_EQ(s[1].nvml_index, 1);
  EXPECT_DOUBLE_EQ(s[1].utilization_percent, 85.0);
  EXPECT_DOUBLE_EQ(s[1].memory_used_mb, 3072.0);
  EXPECT_DOUBLE_EQ(s[1].power_watts, 420.25);
  EXPECT_EQ(format_gpu_sample(s[1]), "cuda:1 util 85% mem 3.0/80.0 GiB 420 W");
}

TEST(GpuMonitor, CudaIndexWithoutAnNvmlDeviceIsAllMissing) {
  auto monitor = open_fake(fake());
  ASSERT_NE(monitor, nullptr);
  GpuSample s = monitor->sample({5})[0];
  EXPECT_EQ(s.index, 5);
  EXPECT_EQ(s.nvml_index, -1);
  EXPECT_TRUE(std::isnan(s.utilization_percent));
  EXPECT_TRUE(std::isnan(s.memory_used_mb));
  EXPECT_TRUE(std::isnan(s.power_watts));
  EXPECT_EQ(format_gpu_sample(s), "cuda:5 util n/a mem n/a n/a");
}

TEST(GpuMonitor, CudaVisibleDevicesRenumbersCudaDevices) {
  unsetenv("CUDA_DEVICE_ORDER");
  auto monitor = open_fake(fake("1,0"));
  ASSERT_NE(monitor, nullptr);
  EXPECT_EQ(monitor->nvml_index_for(0), 1);
  EXPECT_EQ(monitor->nvml_index_for(1), 0);
  EXPECT_EQ(monitor->nvml_index_for(2), -1);
  std::vector<GpuSample> s = monitor->sample({0, 1});
  EXPECT_DOUBLE_EQ(s[0].utilization_percent, 85.0);
  EXPECT_DOUBLE_EQ(s[1].utilization_percent, 35.0);
  EXPECT_NE(monitor->mapping_note().find("by CUDA_VISIBLE_DEVICES=\"1,0\": cuda:0 -> nvml:1, cuda:1 -> nvml:0"),
            std::string::npos)
      << monitor->mapping_note();
  // The fakes are two different models: CUDA's default order (fastest first) may differ from NVML's.
  EXPECT_NE(monitor->mapping_note().find("CUDA_DEVICE_ORDER=PCI_BUS_ID"), std::string::npos);
}

TEST(GpuMonitor, CudaVisibleDevicesEndsAtTheFirstEntryCudaRejects) {
  auto monitor = open_fake(fake("1,7,0"));
  ASSERT_NE(monitor, nullptr);
  EXPECT_EQ(monitor->nvml_index_for(0), 1);
  EXPECT_EQ(monitor->nvml_index_for(1), -1);
  EXPECT_EQ(monitor->nvml_index_for(2), -1);  // CUDA itself sees only cuda:0
  auto mig = open_fake(fake("MIG-4f2a1c9e-0000-0000-0000-000000000000"));
  ASSERT_NE(mig, nullptr);
  EXPECT_EQ(mig->nvml_index_for(0), -1);
}

TEST(GpuMonitor, CudaVisibleDevicesByUuidPrefix) {
  auto monitor = open_fake(fake("GPU-abc00001, GPU-abc00000-fake"));
  ASSERT_NE(monitor, nullptr);
  EXPECT_EQ(monitor->nvml_index_for(0), 1);
  EXPECT_EQ(monitor->nvml_index_for(1), 0);
  auto ambiguous = open_fake(fake("GPU-abc0000"));
  ASSERT_NE(ambiguous, nullptr);
  EXPECT_EQ(ambiguous->nvml_index_for(0), -1);
  // UUIDs name GPUs exactly: no warning about CUDA's device order.
  EXPECT_EQ(monitor->mapping_note().find("CUDA_DEVICE_ORDER"), std::string::npos) << monitor->mapping_note();
}

TEST(GpuMonitor, PciBusIdsWinOverEveryOtherHint) {
  GpuMonitorOptions options = fake("0,1");
  options.cuda_pci_bus_ids = {"0000:65:00.0", "00000000:17:00.0", "0000:99:00.0"};  // CUDA's and NVML's forms
  auto monitor = open_fake(options);
  ASSERT_NE(monitor, nullptr);
  EXPECT_EQ(monitor->nvml_index_for(0), 1);
  EXPECT_EQ(monitor->nvml_index_for(1), 0);
  EXPECT_EQ(monitor->nvml_index_for(2), -1);
  EXPECT_NE(monitor->mapping_note().find("by PCI bus id"), std::string::npos) << monitor->mapping_note();
}

TEST(GpuMonitor, MissingLibraryIsNullWithTheReason) {
  GpuMonitorOptions options = fake();
  options.library = TANDEM_DOCTOR_FAKES "/no_nvml/libnvidia-ml.so.1";
  std::string why;
  EXPECT_EQ(GpuMonitor::open(&why, options), nullptr);
  EXPECT_TRUE(why.starts_with("NVML not available: ")) << why;
  EXPECT_NE(why.find("libnvidia-ml.so.1"), std::string::npos) << why;
  EXPECT_EQ(GpuMonitor::open(nullptr, options), nullptr);  // the reason is optional
}

TEST(GpuMonitor, FailedInitIsNullWithNvmlsWords) {
  setenv("FAKE_NVML_INIT_ERROR", "9", 1);
  std::string why;
  auto monitor = GpuMonitor::open(&why, fake());
  unsetenv("FAKE_NVML_INIT_ERROR");
  EXPECT_EQ(monitor, nullptr);
  EXPECT_EQ(why, "NVML not available: nvmlInit_v2: Driver Not Loaded (9)");
}

TEST(GpuMonitor, SampleIntoReusesTheCallersVector) {
  auto monitor = open_fake(fake());
  ASSERT_NE(monitor, nullptr);
  std::vector<GpuSample> out;
  monitor->sample_into({0, 1}, out);
  const GpuSample* storage = out.data();
  for (int i = 0; i < 10; ++i) monitor->sample_into({1, 0}, out);
  EXPECT_EQ(out.data(), storage);
  EXPECT_EQ(out[0].index, 1);
  EXPECT_DOUBLE_EQ(out[0].utilization_percent, 85.0);
}

TEST(GpuMonitor, SamplesFromSeveralThreadsAtOnce) {
  auto monitor = open_fake(fake());
  ASSERT_NE(monitor, nullptr);
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < wrong.size(); ++t) {
    threads.emplace_back([&, t] {
      std::vector<GpuSample> out;
      for (int i = 0; i < 500; ++i) {
        monitor->sample_into({0, 1}, out);
        if (out[0].utilization_percent != 35.0 || out[1].memory_used_mb != 3072.0) ++wrong[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int w : wrong) EXPECT_EQ(w, 0);
}

TEST(GpuIdleVerdict, IdleGpuWaitingForInputSaysWhatToChange) {
  std::string verdict = gpu_idle_verdict(30.0, 0.4);
  ASSERT_FALSE(verdict.empty());
  for (const char* text : {"30%", "40%", "data.num_parallel_calls", "data.prefetch", "data.cache", "storage"}) {
    EXPECT_NE(verdict.find(text), std::string::npos) << text << " in " << verdict;
  }
  EXPECT_FALSE(gpu_idle_verdict(49.9, 0.21).empty());
}

TEST(GpuIdleVerdict, SilentWhenBusyOrNotWaitingOrUnknown) {
  EXPECT_EQ(gpu_idle_verdict(50.0, 0.9), "");  // busy enough: the input is not what holds it back
  EXPECT_EQ(gpu_idle_verdict(10.0, 0.2), "");  // idle for another reason (small model, all-reduce)
  EXPECT_EQ(gpu_idle_verdict(std::nan(""), 0.5), "");
  EXPECT_EQ(gpu_idle_verdict(10.0, std::nan("")), "");
}

}  // namespace
}  // namespace tandem::backend
