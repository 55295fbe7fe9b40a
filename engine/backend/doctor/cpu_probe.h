// The CPU the CPU backend computes on: its model, its cores, and the vector extensions that decide
// which precisions oneDNN runs fast (AVX-512 BF16 or AMX for bf16; on other AVX-512 CPUs bf16 runs
// 3 to 4 times slower than fp32; without AVX-512, oneDNN 2.6 has no bf16 kernels at all).
#pragma once

#include <string>
#include <vector>

namespace tandem::backend {

struct CpuReport {
  std::string model;  // /proc/cpuinfo's "model name"
  int cores = 0;      // the CPUs this process may run on
  bool avx2 = false, avx512f = false, avx512_bf16 = false, amx_bf16 = false;
  bool avx512_core = false;  // avx512f, bw, vl and dq: the least oneDNN 2.6's bf16 kernels run on

  bool fast_bf16() const { return avx512_bf16 || amx_bf16; }
  bool runs_bf16() const { return avx512_core || amx_bf16; }
  // "avx2, avx512f, avx512_bf16": the extensions present, of the four that matter here.
  std::string extensions() const;
  // "fp32; bf16 (avx512_bf16)", or "fp32 (bf16 would run 3-4x slower: no avx512_bf16 or amx_bf16)".
  std::string fast_precisions() const;
  // The warning for precision: bf16 where it runs but slowly (AVX-512 without avx512_bf16 or
  // amx_bf16), naming what is missing; empty elsewhere.
  std::string bf16_warning() const;
  // Where bf16 cannot run at all (no AVX-512): the error for precision: bf16; empty elsewhere.
  std::string bf16_refusal() const;
};

// From /proc/cpuinfo's text: the first processor's model name and flags.
CpuReport parse_cpuinfo(const std::string& cpuinfo, int cores);
// This machine's.
CpuReport probe_cpu();

}  // namespace tandem::backend
