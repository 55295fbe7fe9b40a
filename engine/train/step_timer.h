// The device-side phases of training steps (forward, backward, exposed all-reduce, optimizer), from
// timer events recorded on the replica's stream: CUDA events on a GPU, where host clocks would only
// measure how long queueing took; host clocks on the CPU, where work runs as it is queued. A step
// is read `lag` steps after it was queued, so reading it rarely makes the host wait.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "engine/core/context.h"

namespace tandem::train {

struct DevicePhases {
  double forward = 0, backward = 0, all_reduce = 0, optimizer = 0;  // seconds
};

class StepTimer {
 public:
  explicit StepTimer(ExecutionContext& ctx, int lag = 2);

  void start();          // before the step's forward pass is queued
  void forward_done();
  void backward_done();
  void wait_begins();    // around each wait for a reduced gradient bucket
  void wait_ends();
  // After the optimizer: closes the step `step`; returns the steps now read (at most lag behind).
  std::vector<std::pair<int64_t, DevicePhases>> step_done(int64_t step);
  // Reads every step still queued (waits for the device): at the end of an epoch.
  std::vector<std::pair<int64_t, DevicePhases>> drain();

 private:
  struct Slot {
    std::unique_ptr<Event> start, forward, backward, done;
    std::vector<std::pair<std::unique_ptr<Event>, std::unique_ptr<Event>>> waits;  // reused across steps
    size_t waits_used = 0;
    int64_t step = -1;
  };

  Slot& current() { return slots_[static_cast<size_t>(queued_ % static_cast<int64_t>(slots_.size()))]; }
  std::pair<int64_t, DevicePhases> read(Slot& slot);
  std::unique_ptr<Event> make_event();

  ExecutionContext& ctx_;
  std::vector<Slot> slots_;
  int64_t queued_ = 0;  // steps closed so far
  int64_t read_ = 0;    // steps read so far
};

}  // namespace tandem::train
