// The doctor's two renderings: aligned text for people, one JSON document for scripts (fields
// driver, cuda_runtime, cudnn, cublas, nccl, gpus, verdict, causes, as issue 7 specifies; nvml,
// every GPU NVML sees with its memory in use, as issue 10 adds).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

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

using Json = nlohmann::ordered_json;

// Empty text means "none" in the report structs; JSON says null.
Json text_or_null(const std::string& text) { return text.empty() ? Json(nullptr) : Json(text); }

Json library_json(const LibraryReport& lib) {
  return Json{{"found", lib.found},
              {"version", lib.found ? Json(lib.version_text) : Json(nullptr)},
              {"version_code", lib.version},
              {"path", lib.found ? Json(lib.path) : Json(nullptr)},
              {"error", text_or_null(lib.error)},
              {"soname", lib.soname},
              {"built_against", lib.built_against},
              {"detail", lib.detail},
              {"on_loader_path", lib.on_loader_path}};
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

Json nvml_json(const NvmlReport& n) {
  Json gpus = Json::array();
  for (const NvmlGpuReport& g : n.gpus) {
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"total_memory", g.memory_total},
                    {"used_memory", g.memory_used},
                    {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
                    {"driver_version", n.driver_version},
                    {"pci_bus_id", text_or_null(g.pci_bus_id)}});
  }
  return Json{{"found", n.found},
              {"path", text_or_null(n.path)},
              {"error", text_or_null(n.error)},
              {"driver_version", n.found ? Json(n.driver_version) : Json(nullptr)},
              {"gpus", std::move(gpus)}};
}

Json gpus_json(const std::vector<GpuReport>& gpus) {
  Json out = Json::array();
  for (const GpuReport& g : gpus) {
    out.push_back({{"index", g.index},
                   {"name", g.name},
                   {"total_memory", g.total_memory},
                   {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)},
                   {"kernels_usable", g.kernels_usable},
                   {"kernels", g.kernels}});
  }
  return out;
}

Json causes_json(const std::vector<Cause>& causes) {
  Json out = Json::array();
  for (const Cause& c : causes) {
    out.push_back({{"severity", severity_name(c.severity)}, {"summary", c.summary}, {"fix", c.fix}});
  }
  return out;
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
  out += fmt::format("CPU: {} ({} core{}): {}; fast precisions: {}\n", r.cpu.model, r.cpu.cores,
                     r.cpu.cores == 1 ? "" : "s", r.cpu.extensions(), r.cpu.fast_precisions());
  if (!r.plugin.empty()) out += "plugin: " + r.plugin + "\n";
  if (!r.causes.empty()) out += "causes:\n";
  for (const Cause& c : r.causes) {
    out += fmt::format("  [{}] {}\n      fix: {}\n", severity_name(c.severity), c.summary, c.fix);
  }
  return out + r.verdict_line + "\n";
}

nlohmann::ordered_json json_document(const DoctorReport& r) {
  return Json{{"driver", library_json(r.driver)},
              {"cuda_runtime", library_json(r.cuda_runtime)},
              {"cudnn", library_json(r.cudnn)},
              {"cublas", library_json(r.cublas)},
              {"nccl", library_json(r.nccl)},
              {"gpus", gpus_json(r.gpus)},
              {"nvml", nvml_json(r.nvml)},
              {"cpu",
               {{"model", r.cpu.model},
                {"cores", r.cpu.cores},
                {"avx2", r.cpu.avx2},
                {"avx512f", r.cpu.avx512f},
                {"avx512_bf16", r.cpu.avx512_bf16},
                {"amx_bf16", r.cpu.amx_bf16},
                {"fast_bf16", r.cpu.fast_bf16()}}},
              {"cuda_visible_devices", r.cuda_visible_devices ? Json(*r.cuda_visible_devices) : Json(nullptr)},
              {"visible_devices_hide_all", r.visible_devices_hide_all},
              {"driver_init_error", text_or_null(r.init_error)},
              {"built_against", {{"cuda", build_info::kCudaVersionText}, {"architectures", r.built_architectures}}},
              {"search", r.search},
              {"plugin", text_or_null(r.plugin)},
              {"verdict", r.verdict_line},
              {"verdict_code", verdict_name(r.verdict)},
              {"exit_code", r.exit_code()},
              {"causes", causes_json(r.causes)}};
}

// One line for scripts; replace, because names and paths come from drivers and the file system
// unchecked, and a stray byte must not make the doctor throw.
std::string render_json(const DoctorReport& r) {
  return json_document(r).dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace tandem::backend
