// Runs tandem_doctor_probe on one folder of fake CUDA libraries, in a child process, and
// returns what it printed and its exit status.
#include "tests/doctor/doctor_util.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

namespace tandem::testing {

ProbeResult run_probe(const std::string& fake_set, const std::string& env, const std::string& args) {
  // env -u: the caller's CUDA_VISIBLE_DEVICES must not leak into a test that did not ask for it.
  std::string command = "env -u CUDA_VISIBLE_DEVICES TANDEM_DOCTOR_LIB_DIRS=" + std::string(TANDEM_DOCTOR_FAKES) +
                        "/" + fake_set + " " + env + " " + TANDEM_DOCTOR_PROBE + " " + args + " 2>&1";
  ProbeResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    result.exit_code = -1;
    result.output = "popen failed: " + command;
    return result;
  }
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace tandem::testing
