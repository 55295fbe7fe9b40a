// Helpers for the doctor's tests: one child process per probe of a fake library set.
#pragma once

#include <string>

namespace tandem::testing {

struct ProbeResult {
  std::string output;
  int exit_code = 0;
};

// Probes <fakes>/<fake_set> with `env` (e.g. "CUDA_VISIBLE_DEVICES=") prepended and the probe's `args`.
ProbeResult run_probe(const std::string& fake_set, const std::string& env = "", const std::string& args = "");

}  // namespace tandem::testing
