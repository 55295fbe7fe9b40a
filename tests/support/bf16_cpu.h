// Tests of precision: bf16 on the CPU skip where oneDNN 2.6 has no bf16 kernels (a CPU without
// AVX-512); the trainer refuses bf16 there with CpuReport::bf16_refusal's words.
#pragma once

#include <gtest/gtest.h>

#include "engine/backend/doctor/cpu_probe.h"

#define TANDEM_REQUIRE_BF16_CPU()                                                       \
  do {                                                                                  \
    if (const auto cpu = ::tandem::backend::probe_cpu(); !cpu.runs_bf16()) GTEST_SKIP() \
        << cpu.bf16_refusal();                                                          \
  } while (false)
