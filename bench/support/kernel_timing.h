// Per-kernel accounting for the benchmarks: a copy of a device's kernel table whose entries time the
// real ones and tally the memory formats of their 4-D activation arguments (to prove channels_last
// runs NHWC throughout). On the CPU the cost is two clock reads per call; on a GPU each call is
// fenced by a stream synchronize before and after, so the time is the device's for that kernel (and
// the step runs slower than unfenced: profile in a separate pass from the timed one).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/core/device.h"

namespace tandem::bench {

struct KernelStats {
  const char* name = "";
  double seconds = 0;
  int64_t calls = 0;
  int64_t nchw_args = 0, nhwc_args = 0;  // 4-D activations (inputs and outputs) by format
};

// Replaces type's registered kernel table by the timed copy. batch tells activations (they lead
// with it) from weights; fence runs before and after every call (empty on the CPU).
void install_timed_kernels(DeviceType type, int64_t batch, std::function<void()> fence = {});
// Turns timing off (the real kernels run again) or back on, without reinstalling.
void set_kernel_timing(bool on);

std::vector<KernelStats>& kernel_stats();
void reset_kernel_stats();

}  // namespace tandem::bench
