// `trainer doctor` as library code: probes the NVIDIA driver and the CUDA libraries with dlopen
// only (never linking them), lists the GPUs, and turns what it found into causes with fixes and
// one verdict. The trainer runs the same checks at start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/backend/doctor/cpu_probe.h"

namespace tandem::backend {

// One probed library: libcuda.so.1, libcudart.so.13, libcudnn.so.9, libcublas.so.13 or libnccl.so.2.
struct LibraryReport {
  std::string name;            // "driver", "cuda_runtime", "cudnn", "cublas", "nccl"
  std::string soname;          // the file name searched for
  bool found = false;          // loaded and its version read
  int version = 0;             // the library's own encoding (cudnnGetVersion, ncclGetVersion, ...)
  std::string version_text;    // "9.19.0"; for the driver, the highest CUDA it supports ("13.0")
  std::string path;            // the real file loaded, symlinks resolved
  std::string error;           // dlerror's text, or which call failed
  std::string built_against;   // the version Tandem was compiled with, "" for the driver
  std::string detail;          // "built for CUDA 13.1", "kernel module 580.65.06", an older soname found
  bool on_loader_path = true;  // false when found only in a fallback folder ($CUDA_HOME/lib64)
};

struct GpuReport {
  int index = 0;
  std::string name;
  size_t total_memory = 0;  // bytes
  int cc_major = 0;
  int cc_minor = 0;
  bool kernels_usable = false;
  std::string kernels;  // "native (sm_90)", "PTX JIT from compute_90 (slow first start)", "none"
};

// One GPU as NVML sees it: every GPU of the machine, in NVML's (PCI bus) order, whatever
// CUDA_VISIBLE_DEVICES says.
struct NvmlGpuReport {
  int index = 0;               // NVML's index (nvidia-smi's)
  std::string name;
  uint64_t memory_total = 0;   // bytes
  uint64_t memory_used = 0;    // bytes, by every process
  int cc_major = 0;
  int cc_minor = 0;
  std::string pci_bus_id;      // "00000000:65:00.0"
};

// libnvidia-ml.so.1: optional (it comes with the driver; without it only the per-GPU utilisation,
// memory and power in the training log are missing), so its absence is a note, never a cause.
struct NvmlReport {
  bool found = false;          // loaded and initialised
  std::string path;            // the real file loaded
  std::string error;           // why not found, or which call failed
  std::string driver_version;  // "580.65.06"
  std::vector<NvmlGpuReport> gpus;
};

enum class Severity {
  kNoGpu,    // why no GPU can be used: the run falls back to the CPU
  kError,    // a GPU is there but CUDA cannot use it
  kWarning,  // works, but worth fixing
};

struct Cause {
  Severity severity = Severity::kError;
  std::string summary;  // one line: what is wrong
  std::string fix;      // what to do about it
};

enum class Verdict { kReadyCuda, kReadyCpuOnly, kNotReady };

struct DoctorOptions {
  // Folders to search instead of the system loader (exclusive: nothing else is tried, so a test
  // folder cannot be shadowed by the real libraries). Empty: TANDEM_DOCTOR_LIB_DIRS (colon
  // separated) if set, else the default order, documented in docs/TROUBLESHOOTING.md: the system
  // loader (LD_LIBRARY_PATH, ld.so.cache, /lib, /usr/lib), then $CUDA_HOME/lib64, the toolkit
  // folder of the build and /usr/local/cuda/lib64, where TensorFlow users expect CUDA.
  std::vector<std::string> lib_dirs;
  // Also load libtandem_cuda.so (load_cuda_plugin) after the probes, as the trainer will; skipped
  // when lib_dirs (or TANDEM_DOCTOR_LIB_DIRS) is set, since the plugin would bind to those files.
  bool probe_plugin = false;
  // The device a config asks for ("cuda", "cpu", "auto"); "cuda" turns "cpu only" into "not ready".
  std::string required_device = "auto";
};

struct DoctorReport {
  LibraryReport driver, cuda_runtime, cudnn, cublas, nccl;
  std::string search;                         // how libraries were searched, in words
  std::string init_error;                     // cuInit's failure, empty when it succeeded
  int init_result = 0;                        // cuInit's CUresult (100: no CUDA-capable device)
  std::optional<std::string> cuda_visible_devices;
  bool visible_devices_hide_all = false;
  std::vector<GpuReport> gpus;
  NvmlReport nvml;
  CpuReport cpu;                              // the CPU backend's processor and fast precisions
  std::string built_architectures;            // CMAKE_CUDA_ARCHITECTURES, "75 80 86 90"
  std::string plugin;                         // load_cuda_plugin's summary when probed
  bool plugin_loaded = false;
  std::string required_device = "auto";
  std::vector<Cause> causes;
  Verdict verdict = Verdict::kNotReady;
  std::string verdict_line;                   // "ready: cuda (2 GPUs)", ...

  // 0 for both ready verdicts, 1 for not ready.
  int exit_code() const { return verdict == Verdict::kNotReady ? 1 : 0; }
};

// Probes everything and diagnoses. Never throws for what it finds; libraries stay loaded.
DoctorReport run_doctor(const DoctorOptions& options = {});

// Fills causes, verdict and verdict_line from the probe results (pure; run_doctor calls it).
void diagnose(DoctorReport& report);

// Whether our kernels run on compute capability major.minor, given CMAKE_CUDA_ARCHITECTURES
// ("75 80-real 90-virtual"); fills gpu.kernels and gpu.kernels_usable.
void match_architectures(GpuReport& gpu, const std::string& architectures);

// "9.19.0" from the integer encodings each library uses.
std::string cuda_version_text(int version);   // 13000 -> "13.0"
std::string cudnn_version_text(int version);  // 91900 -> "9.19.0", 8907 -> "8.9.7"
std::string triple_version_text(int version); // 130100 -> "13.1.0" (cuBLAS, NCCL >= 2.9)

std::string render_text(const DoctorReport& report);
// The --json document (keys in the order shown in docs/TROUBLESHOOTING.md) and its one-line text.
nlohmann::ordered_json json_document(const DoctorReport& report);
std::string render_json(const DoctorReport& report);

}  // namespace tandem::backend

