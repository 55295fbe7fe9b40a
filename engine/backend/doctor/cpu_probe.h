// The CPU the CPU backend computes on: its model, its cores, and the vector extensions that decide
// which precisions oneDNN runs fast (AVX-512 BF16 or AMX for bf16; without them bf16 runs 3 to 4
// times slower than fp32).
#pragma once

#include <string>
#include <vector>

namespace tandem::backend {

struct CpuReport {
  std::string model;  // /proc/cpuinfo's "model name"
  int cores = 0;      // the CPUs this process may run on
  bool avx2 = false, avx512f = false, avx512_bf16 = false, amx_bf16 = false;

  bool fast_bf16() const { return avx512_bf16 || amx_bf16; }
  // "avx2, avx512f, avx512_bf16": the extensions present, of the four that matter here.
  std::string extensions() const;
  // "fp32; bf16 (avx512_bf16)", or "fp32 (bf16 would run 3-4x slower: no avx512_bf16 or amx_bf16)".
  std::string fast_precisions() const;
  // Empty where bf16 is fast; else the warning for precision: bf16, naming the missing instructions.
  std::string bf16_warning() const;
};

// From /proc/cpuinfo's text: the first processor's model name and flags.
CpuReport parse_cpuinfo(const std::string& cpuinfo, int cores);
// This machine's.
CpuReport probe_cpu();

}  // namespace tandem::backend
