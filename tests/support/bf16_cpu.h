// Tests of precision: bf16 on the CPU skip where oneDNN 2.6 has no bf16 kernels (a CPU without
// AVX-512); the trainer refuses bf16 there with CpuReport::bf16_refusal's words.
#pragma once

#include <gtest/gtest.h>

#include "engine/backend/doctor/cpu_probe.h"
#include "engine/core/context.h"

#define TANDEM_REQUIRE_BF16_CPU()                                                       \
  do {                                                                                  \
    if (const auto cpu = ::tandem::backend::probe_cpu(); !cpu.runs_bf16()) GTEST_SKIP() \
        << cpu.bf16_refusal();                                                          \
  } while (false)

namespace tandem::testing {

// A CPU context of 2 threads computing in bf16, shared by a test program's bf16 tests.
inline ExecutionContext& bf16_cpu_context() {
  static ExecutionContext ctx(Device::cpu(), 2, 1, KernelOptions{false, false, Precision::kBf16});
  return ctx;
}

}  // namespace tandem::testing
