// The doctor's two renderings: aligned text for people, one JSON document for scripts (fields
// driver, cuda_runtime, cudnn, cublas, nccl, gpus, verdict, causes, as issue 7 specifies; nvml,
// every GPU NVML sees with its memory in use, as issue 10 adds).
#include <fmt/format.h>

#include "engine/backend/doctor/cuda_build_info.h"
#include "engine/backend/doctor/doctor.h"

namespace tandem::backend {
namespace {

std::string_view severity_name(Severity s) {
  switch (s) {
    case Severity::kNoGpu: return "no_gpu";
    case Severity::kError: return "error";
    case Severity::kWarning: return "warning";
  }
  return "error";
}

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kReadyCuda: return "ready_cuda";
    case Verdict::kReadyCpuOnly: return "ready_cpu_only";
    case Verdict::kNotReady: return "not_ready";
  }
  return "not_ready";
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_library(const LibraryReport& lib) {
  return fmt::format(
      "{{\"found\": {}, \"version\": {}, \"version_code\": {}, \"path\": {}, \"error\": {}, \"soname\": {}, "
      "\"built_against\": {}, \"detail\": {}, \"on_loader_path\": {}}}",
      lib.found, lib.found ? json_string(lib.version_text) : "null", lib.version,
      lib.found ? json_string(lib.path) : "null", lib.error.empty() ? "null" : json_string(lib.error),
      json_string(lib.soname), json_string(lib.built_against), json_string(lib.detail), lib.on_loader_path);
}

std::string text_library(const char* title, const LibraryReport& lib) {
  std::string line = fmt::format("  {:<13} {:<16} ", title, lib.soname);
  if (!lib.found) {
    line += "NOT FOUND  " + lib.error;
    if (!lib.detail.empty()) line += "; " + lib.detail;
    return line + "\n";
  }
  std::string version = lib.name == "driver" ? "supports CUDA " + lib.version_text : lib.version_text;
  line += fmt::format("{:<20} {}", version, lib.path);
  std::string notes;
  if (!lib.built_against.empty()) notes += "built against " + lib.built_against;
  if (!lib.detail.empty()) notes += (notes.empty() ? "" : "; ") + lib.detail;
  if (!lib.on_loader_path) notes += (notes.empty() ? "" : "; ") + std::string("not on the loader's path");
  if (!lib.error.empty()) notes += (notes.empty() ? "" : "; ") + lib.error;
  return line + (notes.empty() ? "" : "  (" + notes + ")") + "\n";
}

// NVML's view: every GPU of the machine with its memory in use, or one line saying why there is
// none (the training log then has no per-GPU utilisation, memory or power; nothing else changes).
std::string text_nvml(const NvmlReport& n) {
  if (!n.found) {
    std::string where = n.path.empty() ? "" : " at " + n.path;
    return fmt::format("NVML: not available{} ({}): the training log will not show GPU utilisation, memory and power\n",
                       where, n.error);
  }
  std::string out = fmt::format("NVML: driver {}, {} GPU{} on this machine (CUDA_VISIBLE_DEVICES does not apply), {}\n",
                                n.driver_version, n.gpus.size(), n.gpus.size() == 1 ? "" : "s", n.path);
  for (const NvmlGpuReport& g : n.gpus) {
    out += fmt::format("  nvml:{}  {}  {:.1f} GiB, {:.1f} GiB used  compute capability {}.{}  driver {}{}\n", g.index,
                       g.name, static_cast<double>(g.memory_total) / (1 << 30),
                       static_cast<double>(g.memory_used) / (1 << 30), g.cc_major, g.cc_minor, n.driver_version,
                       g.pci_bus_id.empty() ? "" : "  bus " + g.pci_bus_id);
  }
  return out;
}

std::string json_nvml(const NvmlReport& n) {
  std::string gpus;
  for (const NvmlGpuReport& g : n.gpus) {
    gpus += fmt::format(
        "{}{{\"index\": {}, \"name\": {}, \"total_memory\": {}, \"used_memory\": {}, "
        "\"compute_capability\": \"{}.{}\", \"driver_version\": {}, \"pci_bus_id\": {}}}",
        gpus.empty() ? "" : ", ", g.index, json_string(g.name), g.memory_total, g.memory_used, g.cc_major, g.cc_minor,
        json_string(n.driver_version), g.pci_bus_id.empty() ? "null" : json_string(g.pci_bus_id));
  }
  return fmt::format("{{\"found\": {}, \"path\": {}, \"error\": {}, \"driver_version\": {}, \"gpus\": [{}]}}", n.found,
                     n.path.empty() ? "null" : json_string(n.path), n.error.empty() ? "null" : json_string(n.error),
                     n.found ? json_string(n.driver_version) : "null", gpus);
}

}  // namespace

std::string render_text(const DoctorReport& r) {
  std::string out = fmt::format("Tandem doctor: built with CUDA {}, kernels for {}\n",
                                build_info::kCudaBuilt ? build_info::kCudaVersionText : "none (CPU only build)",
                                r.built_architectures.empty() ? "no GPU" : "sm " + r.built_architectures);
  out += "libraries (searched " + r.search + "):\n";
  out += text_library("driver", r.driver);
  out += text_library("cuda runtime", r.cuda_runtime);
  out += text_library("cudnn", r.cudnn);
  out += text_library("cublas", r.cublas);
  out += text_library("nccl", r.nccl);
  out += fmt::format("CUDA_VISIBLE_DEVICES: {}\n",
                     r.cuda_visible_devices ? fmt::format("\"{}\"{}", *r.cuda_visible_devices,
                                                          r.visible_devices_hide_all ? " (hides every GPU)" : "")
                                            : "not set");
  if (!r.init_error.empty()) out += "driver init: " + r.init_error + "\n";
  out += fmt::format("GPUs: {}\n", r.gpus.empty() ? "none" : std::to_string(r.gpus.size()));
  for (const GpuReport& g : r.gpus) {
    out += fmt::format("  cuda:{}  {}  {:.1f} GiB  compute capability {}.{}  kernels: {}\n", g.index, g.name,
                       static_cast<double>(g.total_memory) / (1 << 30), g.cc_major, g.cc_minor, g.kernels);
  }
  out += text_nvml(r.nvml);
  if (!r.plugin.empty()) out += "plugin: " + r.plugin + "\n";
  if (!r.causes.empty()) out += "causes:\n";
  for (const Cause& c : r.causes) {
    out += fmt::format("  [{}] {}\n      fix: {}\n", severity_name(c.severity), c.summary, c.fix);
  }
  return out + r.verdict_line + "\n";
}

std::string render_json(const DoctorReport& r) {
  std::string gpus;
  for (const GpuReport& g : r.gpus) {
    gpus += fmt::format(
        "{}{{\"index\": {}, \"name\": {}, \"total_memory\": {}, \"compute_capability\": \"{}.{}\", "
        "\"kernels_usable\": {}, \"kernels\": {}}}",
        gpus.empty() ? "" : ", ", g.index, json_string(g.name), g.total_memory, g.cc_major, g.cc_minor,
        g.kernels_usable, json_string(g.kernels));
  }
  std::string causes;
  for (const Cause& c : r.causes) {
    causes += fmt::format("{}{{\"severity\": \"{}\", \"summary\": {}, \"fix\": {}}}", causes.empty() ? "" : ", ",
                          severity_name(c.severity), json_string(c.summary), json_string(c.fix));
  }
  return fmt::format(
      "{{\"driver\": {}, \"cuda_runtime\": {}, \"cudnn\": {}, \"cublas\": {}, \"nccl\": {}, \"gpus\": [{}], "
      "\"nvml\": {}, \"cuda_visible_devices\": {}, \"visible_devices_hide_all\": {}, \"driver_init_error\": {}, "
      "\"built_against\": {{\"cuda\": {}, \"architectures\": {}}}, \"search\": {}, \"plugin\": {}, "
      "\"verdict\": {}, \"verdict_code\": \"{}\", \"exit_code\": {}, \"causes\": [{}]}}\n",
      json_library(r.driver), json_library(r.cuda_runtime), json_library(r.cudnn), json_library(r.cublas),
      json_library(r.nccl), gpus, json_nvml(r.nvml),
      r.cuda_visible_devices ? json_string(*r.cuda_visible_devices) : "null",
      r.visible_devices_hide_all, r.init_error.empty() ? "null" : json_string(r.init_error),
      json_string(build_info::kCudaVersionText), json_string(r.built_architectures), json_string(r.search),
      r.plugin.empty() ? "null" : json_string(r.plugin), json_string(r.verdict_line), verdict_name(r.verdict),
      r.exit_code(), causes);
}

}  // namespace tandem::backend
