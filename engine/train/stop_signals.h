// Stopping a run cleanly on SIGINT, SIGTERM (Slurm and Kubernetes send SIGTERM some seconds
// before SIGKILL) or SIGHUP (an ssh session that drops): the first signal asks the trainer to finish its step, save a checkpoint and
// return; a second one takes the signal's default action (the process dies at once).
#pragma once

#include <atomic>

namespace tandem::train {

// Installs the handlers of SIGINT, SIGTERM and SIGHUP for the object's lifetime (one at a time per
// process) and restores the previous ones afterwards.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // What TrainerSetup::stop points at: 0, or the number of the first signal received.
  const std::atomic<int>& flag() const;
};

}  // namespace tandem::train
