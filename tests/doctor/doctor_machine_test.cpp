// The doctor on the machine the tests run on, with its real libraries: whatever it finds, the
// verdict and exit code agree, and a missing driver is named as the cause.
#include <gtest/gtest.h>

#include "tests/doctor/doctor_util.h"

namespace tandem::testing {
namespace {

TEST(DoctorMachine, VerdictMatchesExitCodeAndNamesAMissingDriver) {
  // No fake folder: an empty TANDEM_DOCTOR_LIB_DIRS means the default search.
  ProbeResult r = run_probe("", "TANDEM_DOCTOR_LIB_DIRS=");
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.output;
  bool ready = r.output.find("\nready: ") != std::string::npos;
  EXPECT_EQ(ready, r.exit_code == 0) << r.output;
  if (r.output.find("libcuda.so.1     NOT FOUND") != std::string::npos) {
    EXPECT_NE(r.output.find("ready: cpu only (no GPU): no NVIDIA driver"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace tandem::testing
