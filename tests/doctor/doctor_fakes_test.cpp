// Every verdict path of the doctor, each against a folder of stand-in CUDA libraries with the
// real sonames (built by tests/doctor/CMakeLists.txt), probed in a child process.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "engine/backend/doctor/cuda_build_info.h"
#include "tests/doctor/doctor_util.h"

namespace tandem::testing {
namespace {


// The fakes stand in for the CUDA 13 stack this build compares against; a build without CUDA
// has nothing to compare with and always says "cpu only", so the verdict paths cannot be shown.
class DoctorFakes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!backend::build_info::kCudaBuilt) GTEST_SKIP() << "Tandem was built without CUDA (TANDEM_WITH_CUDA=OFF)";
  }
};

#define EXPECT_HAS(output, text) EXPECT_NE((output).find(text), std::string::npos) << (output)

TEST_F(DoctorFakes, TwoGpusReady) {
  ProbeResult r = run_probe("ready_2gpu");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_HAS(r.output, "ready: cuda (2 GPUs)");
  EXPECT_HAS(r.output, "cuda:1  Fake GPU 1  80.0 GiB  compute capability 9.0  kernels: native (sm_90)");
  EXPECT_HAS(r.output, "9.19.0");
  EXPECT_HAS(r.output, "supports CUDA 13.0");
  EXPECT_HAS(r.output, "2.28.9");
  EXPECT_EQ(r.output.find("causes:"), std::string::npos) << r.output;
}

TEST_F(DoctorFakes, NvmlListsEveryGpuWithItsNumbers) {
  ProbeResult r = run_probe("ready_2gpu", "CUDA_VISIBLE_DEVICES=1");
  EXPECT_EQ(r.exit_code, 0);
  // NVML lists both GPUs of the machine although CUDA sees one.
  EXPECT_HAS(r.output, "NVML: driver 580.65.06, 2 GPUs on this machine (CUDA_VISIBLE_DEVICES does not apply), /");
  EXPECT_HAS(r.output, "  nvml:0  Fake GPU 0  80.0 GiB, 1.5 GiB used  compute capability 9.0  driver 580.65.06  "
                       "bus 00000000:17:00.0\n");
  EXPECT_HAS(r.output, "  nvml:1  Fake GPU 1  80.0 GiB, 3.0 GiB used  compute capability 9.0  driver 580.65.06  "
                       "bus 00000000:65:00.0\n");
  EXPECT_HAS(r.output, "ready: cuda (1 GPU)");
}

TEST_F(DoctorFakes, NvmlInJson) {
  ProbeResult r = run_probe("ready_2gpu", "", "--json");
  nlohmann::json nvml = nlohmann::json::parse(r.output).at("nvml");
  EXPECT_EQ(nvml["found"], true);
  EXPECT_EQ(nvml["path"].get<std::string>().rfind('/', 0), 0u) << r.output;
  EXPECT_TRUE(nvml["error"].is_null());
  EXPECT_EQ(nvml["driver_version"], "580.65.06");
  ASSERT_EQ(nvml["gpus"].size(), 2u) << r.output;
  EXPECT_EQ(nvml["gpus"][0]["index"], 0);
  EXPECT_EQ(nvml["gpus"][1], nlohmann::json::parse(R"({"index": 1, "name": "Fake GPU 1", "total_memory": 85899345920,
      "used_memory": 3221225472, "compute_capability": "9.0", "driver_version": "580.65.06",
      "pci_bus_id": "00000000:65:00.0"})"));
}

// NVML is optional: without it the doctor says so in one line and the verdict does not change.
TEST_F(DoctorFakes, MissingNvmlIsOneLineNotACause) {
  ProbeResult r = run_probe("no_nvml");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_HAS(r.output, "\nNVML: not available (libnvidia-ml.so.1: not found in ");
  EXPECT_HAS(r.output, "): the training log will not show GPU utilisation, memory and power\n");
  EXPECT_EQ(r.output.find("nvml:0"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("causes:"), std::string::npos) << r.output;
  EXPECT_HAS(r.output, "ready: cuda (2 GPUs)");
  ProbeResult json = run_probe("no_nvml", "", "--json");
  nlohmann::json nvml = nlohmann::json::parse(json.output).at("nvml");
  EXPECT_EQ(nvml["found"], false);
  EXPECT_TRUE(nvml["path"].is_null());
  EXPECT_EQ(nvml["error"].get<std::string>().rfind("libnvidia-ml.so.1: not found in ", 0), 0u) << json.output;
  EXPECT_TRUE(nvml["driver_version"].is_null());
  EXPECT_EQ(nvml["gpus"], nlohmann::json::array());
}

TEST_F(DoctorFakes, NvmlThatCannotStartIsOneLine) {
  ProbeResult r = run_probe("ready_2gpu", "FAKE_NVML_INIT_ERROR=9");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_HAS(r.output, "\nNVML: not available at /");
  EXPECT_HAS(r.output, "libnvidia-ml.so.1 (nvmlInit_v2: Driver Not Loaded (9)): the training log will not show");
}

TEST_F(DoctorFakes, NvmlWithoutLibcudaPointsAtDriverCapabilities) {
  ProbeResult r = run_probe("nvml_without_libcuda");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_HAS(r.output,
             "ready: cpu only (no GPU): no CUDA driver library although NVML sees 2 GPUs (driver 580.65.06)");
  EXPECT_HAS(r.output, "NVIDIA_DRIVER_CAPABILITIES=compute,utility");
}

TEST_F(DoctorFakes, JsonCarriesEveryField) {
  ProbeResult r = run_probe("ready_2gpu", "", "--json");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
  nlohmann::ordered_json doc = nlohmann::ordered_json::parse(r.output);
  std::vector<std::string> keys;
  for (const auto& [key, value] : doc.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"driver", "cuda_runtime", "cudnn", "cublas", "nccl", "gpus", "nvml", "cpu",
                                            "cuda_visible_devices", "visible_devices_hide_all", "driver_init_error",
                                            "built_against", "search", "plugin", "verdict", "verdict_code",
                                            "exit_code", "causes"}));
  for (const auto& [lib, version] : std::vector<std::pair<std::string, std::string>>{
           {"driver", "13.0"}, {"cudnn", "9.19.0"}, {"cublas", "13.1.0"}, {"nccl", "2.28.9"}}) {
    EXPECT_EQ(doc[lib]["found"], true) << lib;
    EXPECT_EQ(doc[lib]["version"], version) << lib;
    EXPECT_EQ(doc[lib]["path"].get<std::string>().rfind('/', 0), 0u) << lib;
  }
  EXPECT_TRUE(doc["cuda_runtime"].is_object());
  EXPECT_EQ(doc["gpus"][0]["index"], 0);
  EXPECT_EQ(doc["verdict"], "ready: cuda (2 GPUs)");
  EXPECT_EQ(doc["causes"], nlohmann::ordered_json::array());
}

TEST_F(DoctorFakes, DriverTooOldIsNotReady) {
  ProbeResult r = run_probe("old_driver");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.output, "not ready: driver too old: it supports CUDA up to 12.4, the CUDA runtime is 13.0");
  EXPECT_HAS(r.output, "580.65.06");
}

TEST_F(DoctorFakes, MissingCudnnIsNotReady) {
  ProbeResult r = run_probe("no_cudnn");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.output, "not ready: cuDNN missing: could not load libcudnn.so.9");
  EXPECT_HAS(r.output, "install cuDNN 9 for CUDA 13");
}

TEST_F(DoctorFakes, CudnnMajorMismatchNamesTheOtherVersion) {
  ProbeResult r = run_probe("cudnn8_only");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.output, "found libcudnn.so.8 at");
  EXPECT_HAS(r.output, "(cuDNN 8.9.7)");
  EXPECT_HAS(r.output, "install cuDNN 9 for CUDA 13");
}

TEST_F(DoctorFakes, CudnnBuiltForAnotherCudaIsNotReady) {
  ProbeResult r = run_probe("cudnn_for_cuda12", "", "--json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.output, "was built for CUDA 12.8, but the CUDA runtime is 13.0");
  EXPECT_EQ(nlohmann::json::parse(r.output)["verdict_code"], "not_ready");
}

TEST_F(DoctorFakes, MissingNcclBlocksSeveralGpusOnly) {
  ProbeResult two = run_probe("no_nccl_2gpu");
  EXPECT_EQ(two.exit_code, 1);
  EXPECT_HAS(two.output, "not ready: NCCL missing: could not load libnccl.so.2");
  ProbeResult one = run_probe("no_nccl_1gpu");
  EXPECT_EQ(one.exit_code, 0);
  EXPECT_HAS(one.output, "ready: cuda (1 GPU)");
  EXPECT_HAS(one.output, "[warning] NCCL missing");
}

TEST_F(DoctorFakes, NoGpuIsCpuOnly) {
  ProbeResult r = run_probe("no_gpu");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_HAS(r.output, "driver init: cuInit: no CUDA-capable device is detected (100)");
  EXPECT_HAS(r.output, "ready: cpu only (no GPU): no GPU visible");
}

TEST_F(DoctorFakes, CudaVisibleDevicesHidingEveryGpu) {
  ProbeResult r = run_probe("ready_2gpu", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_HAS(r.output, "CUDA_VISIBLE_DEVICES: \"\" (hides every GPU)");
  EXPECT_HAS(r.output, "ready: cpu only (no GPU): CUDA_VISIBLE_DEVICES=\"\" hides every GPU");
  ProbeResult one = run_probe("ready_2gpu", "CUDA_VISIBLE_DEVICES=1");
  EXPECT_HAS(one.output, "ready: cuda (1 GPU)");
}

TEST_F(DoctorFakes, NoDriverIsCpuOnlyAndNamesLibcuda) {
  ProbeResult r = run_probe("no_driver");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_HAS(r.output, "ready: cpu only (no GPU): no NVIDIA driver: libcuda.so.1: not found in");
}

TEST_F(DoctorFakes, ConfiguredCudaWithoutGpuIsNotReady) {
  ProbeResult r = run_probe("no_driver", "", "--device cuda");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.output, "not ready: device: cuda is configured, but no NVIDIA driver");
}

TEST_F(DoctorFakes, GpuWithoutOurKernelsIsNotReady) {
  ProbeResult r = run_probe("pascal_gpu");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.output, "not ready: GPU 0 (Fake GPU 0, compute capability 6.1) has no Tandem kernels: they were built "
                       "for sm " + std::string(backend::build_info::kCudaArchitectures));
  EXPECT_HAS(r.output, "CMAKE_CUDA_ARCHITECTURES");
}

}  // namespace
}  // namespace tandem::testing
