// The CUDA plugin's error checks, without a GPU: a sticky error (an earlier kernel's fault) is named
// as such rather than blamed on the call that surfaced it, and the device guard's no-throw form
// (what destructors use) does not throw where the throwing one does.
#include <gtest/gtest.h>

#include <string>

#if TANDEM_TEST_CUDA_CHECK
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_guard.h"
#include "engine/core/error.h"

namespace tandem::cuda {
namespace {

std::string message_of(cudaError_t probe, std::string_view during, ErrorCode expected) {
  try {
    check_no_earlier_fault(probe, during);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected);
    return e.what();
  }
  return "";
}

TEST(CudaCheck, AStickyErrorIsNamedAsAnEarlierKernelsFault) {
  for (cudaError_t sticky : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorAssert}) {
    EXPECT_TRUE(is_sticky_error(sticky));
    const std::string what = message_of(sticky, "conv2d_forward x=[8, 3, 32, 32] fell back", ErrorCode::kInternal);
    EXPECT_NE(what.find(cudaGetErrorName(sticky)), std::string::npos) << what;
    EXPECT_NE(what.find("an earlier kernel faulted"), std::string::npos) << what;
    EXPECT_NE(what.find("CUDA_LAUNCH_BLOCKING=1"), std::string::npos) << what;
    EXPECT_NE(what.find("conv2d_forward x=[8, 3, 32, 32] fell back"), std::string::npos) << what;
  }
}

TEST(CudaCheck, AQuietOrBusyStreamPassesAndOtherErrorsNameTheCall) {
  EXPECT_EQ(message_of(cudaSuccess, "x", ErrorCode::kInternal), "");
  EXPECT_EQ(message_of(cudaErrorNotReady, "x", ErrorCode::kInternal), "");
  EXPECT_FALSE(is_sticky_error(cudaErrorMemoryAllocation));
  const std::string what = message_of(cudaErrorMemoryAllocation, "the bias add", ErrorCode::kResourceExhausted);
  EXPECT_NE(what.find("the bias add"), std::string::npos) << what;
  EXPECT_EQ(what.find("an earlier kernel faulted"), std::string::npos) << what;
}

// cuda:9999 exists on no machine: without a driver cudaGetDevice fails, with one cudaSetDevice does.
TEST(DeviceGuard, TheNoThrowFormReportsInsteadOfThrowing) {
  try {
    DeviceGuard guard(9999);
    FAIL() << "cuda:9999 was made current";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
  }
  DeviceGuard quiet(9999, DeviceGuard::NoThrow{});
  EXPECT_FALSE(quiet.ok());
}

}  // namespace
}  // namespace tandem::cuda
#else
TEST(CudaCheck, NeedsTheCudaToolkit) { GTEST_SKIP() << "this build has no CUDA plugin (no toolkit at configure time)"; }
#endif
