#include "engine/backend/doctor/cpu_probe.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <set>
#include <sstream>

#include "engine/core/context.h"

namespace tandem::backend {
namespace {

// The value after "key<tabs>: " on the first line that has the key; empty when none does.
std::string first_value(const std::string& cpuinfo, const std::string& key) {
  std::istringstream lines(cpuinfo);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with(key)) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos || line.find_first_not_of(" \t", key.size()) != colon) continue;
    const size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return {};
}

}  // namespace

std::string CpuReport::extensions() const {
  std::vector<std::string> present;
  for (auto [name, has] : {std::pair{"avx2", avx2}, {"avx512f", avx512f}, {"avx512_bf16", avx512_bf16},
                           {"amx_bf16", amx_bf16}}) {
    if (has) present.emplace_back(name);
  }
  return present.empty() ? std::string("none of avx2, avx512f, avx512_bf16, amx_bf16")
                         : fmt::format("{}", fmt::join(present, ", "));
}

std::string CpuReport::fast_precisions() const {
  if (amx_bf16) return "fp32; bf16 (amx_bf16)";
  if (avx512_bf16) return "fp32; bf16 (avx512_bf16)";
  if (avx512_core) return "fp32 (bf16 would run 3-4x slower than fp32: no avx512_bf16 or amx_bf16)";
  return "fp32 (bf16 cannot run here: oneDNN's bf16 kernels need AVX-512: avx512f, bw, vl and dq)";
}

std::string CpuReport::bf16_warning() const {
  if (fast_bf16() || !runs_bf16()) return {};
  return fmt::format("precision: bf16 on this CPU ({}) runs 3-4x slower than fp32: it has neither avx512_bf16 nor "
                     "amx_bf16, so oneDNN emulates bf16 on AVX-512; set precision: fp32 here, or run on a CPU with "
                     "them (Intel Cooper Lake, Sapphire Rapids or later; AMD Zen 4 or later)",
                     model);
}

std::string CpuReport::bf16_refusal() const {
  if (runs_bf16()) return {};
  return fmt::format("precision: bf16 cannot run on this CPU ({}: {}): oneDNN's bf16 kernels need AVX-512 "
                     "(avx512f, avx512bw, avx512vl and avx512dq) at least, and avx512_bf16 or amx_bf16 to be fast; "
                     "set precision: fp32",
                     model, extensions());
}

CpuReport parse_cpuinfo(const std::string& cpuinfo, int cores) {
  CpuReport r;
  r.model = first_value(cpuinfo, "model name");
  if (r.model.empty()) r.model = "unknown";
  r.cores = cores;
  std::set<std::string> flags;
  std::istringstream words(first_value(cpuinfo, "flags"));
  for (std::string flag; words >> flag;) flags.insert(flag);
  r.avx2 = flags.contains("avx2");
  r.avx512f = flags.contains("avx512f");
  r.avx512_core = r.avx512f && flags.contains("avx512bw") && flags.contains("avx512vl") && flags.contains("avx512dq");
  r.avx512_bf16 = flags.contains("avx512_bf16");
  r.amx_bf16 = flags.contains("amx_bf16");
  return r;
}

CpuReport probe_cpu() {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream text;
  text << in.rdbuf();
  return parse_cpuinfo(text.str(), available_cores());
}

}  // namespace tandem::backend
