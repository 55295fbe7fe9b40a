// NVML (libnvidia-ml.so.1, shipped with the NVIDIA driver) loaded at run time, never linked: what
// people otherwise watch `nvidia-smi` for. GpuMonitor samples each replica GPU's utilisation,
// memory and power once per log interval; the doctor lists every GPU NVML sees. NVML's types are
// declared in nvml.cpp as plain C (nvml.h is not installed and tandem_backend includes no CUDA
// header).
#pragma once

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/doctor/doctor.h"

namespace tandem::backend {

// One GPU at one moment. A reading NVML cannot give (power on some boards, utilisation on a MIG
// instance, a CUDA index with no NVML device) is NaN: skip non-finite values when logging.
struct GpuSample {
  static constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();
  int index = -1;                         // the CUDA device index asked for (the replica's cuda:N)
  int nvml_index = -1;                    // the NVML device it was mapped to; -1: none
  double utilization_percent = kMissing;  // % of NVML's last sample period (1/6 s to 1 s) a kernel ran
  double memory_used_mb = kMissing;       // MiB (2^20 bytes, as nvidia-smi), every process's, not only ours
  double memory_total_mb = kMissing;      // MiB
  double power_watts = kMissing;          // board power draw
};

// "cuda:0 util 97% mem 31.2/80.0 GiB 412 W", with "n/a" for missing readings: for the step line.
std::string format_gpu_sample(const GpuSample& sample);

struct GpuMonitorOptions {
  // A bare soname is found as the system loader finds it; a path (tests) is opened as given.
  std::string library = "libnvidia-ml.so.1";
  // Element i: the PCI bus id of CUDA device i (cudaDeviceGetPCIBusId, "0000:65:00.0"). When
  // given, CUDA devices are matched to NVML devices by bus id, which is always right.
  std::vector<std::string> cuda_pci_bus_ids;
  // The CUDA_VISIBLE_DEVICES to map by when no bus ids are given; nullopt: not set. Defaults to
  // the process environment at the time the options are made.
  std::optional<std::string> cuda_visible_devices = environment_cuda_visible_devices();

  static std::optional<std::string> environment_cuda_visible_devices();
};

// Thread-safe (sample() is const and NVML itself is thread-safe) and cheap: the device handles
// and the CUDA-to-NVML map are made once in open(), a sample is three NVML queries per GPU.
//
// CUDA and NVML number GPUs differently. NVML counts every GPU of the machine in PCI bus order
// and ignores CUDA_VISIBLE_DEVICES; CUDA counts only the visible ones. Without bus ids, CUDA
// device i maps to the i-th entry of CUDA_VISIBLE_DEVICES when it is set (an index, or a GPU-UUID
// or a prefix of one, as CUDA accepts; the list ends at the first entry CUDA would reject; MIG
// instances map to nothing), else to NVML device i. Numeric indices are CUDA's own order, which
// equals NVML's when every GPU is the same model or CUDA_DEVICE_ORDER=PCI_BUS_ID; mapping_note()
// warns when neither holds. Passing cuda_pci_bus_ids removes the guesswork.
class GpuMonitor {
 public:
  // nullptr, and the reason in *why_not (one line), when NVML cannot be loaded or initialised.
  static std::unique_ptr<GpuMonitor> open(std::string* why_not, const GpuMonitorOptions& options = {});
  ~GpuMonitor();  // nvmlShutdown (NVML counts inits, so other users stay initialised)
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // One sample per CUDA index, in the order given.
  std::vector<GpuSample> sample(const std::vector<int>& cuda_indices) const;
  // The same into a caller-kept vector, which allocates nothing once it has grown.
  void sample_into(const std::vector<int>& cuda_indices, std::vector<GpuSample>& out) const;

  int nvml_index_for(int cuda_index) const;  // -1 when it maps to no NVML device
  int nvml_device_count() const;
  const std::string& driver_version() const;  // "580.65.06"
  // How CUDA indices were mapped, in words, with a warning when the map may be wrong.
  const std::string& mapping_note() const;

 private:
  struct State;  // NVML's entry points, device handles and the map (nvml.cpp)
  explicit GpuMonitor(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// A GPU idles (under 50% utilisation) while its replica waits for input (over 20% of the step
// time): a sentence naming both numbers and what to change in the input pipeline; empty when
// that is not so or a number is missing (NaN). input_wait_fraction is in [0, 1].
constexpr double kIdleGpuUtilizationPercent = 50.0;
constexpr double kInputBoundWaitFraction = 0.2;
std::string gpu_idle_verdict(double utilization_percent, double input_wait_fraction);

namespace doctor_detail {
struct SearchPolicy;
// The doctor's NVML probe: libnvidia-ml.so.1 as the policy says (never from the toolkit's
// fallback folders: NVML comes with the driver), its driver version and every GPU it sees.
NvmlReport probe_nvml(const SearchPolicy& policy);
}  // namespace doctor_detail

}  // namespace tandem::backend
