// The communicator of a run with one replica: every collective over a group of one is the identity
// (all_gather a copy), so nothing is launched, no NCCL communicator is made and no bucket is packed.
// A single-GPU run then has no NCCL set-up to fail and no per-parameter copies each step.
#pragma once

#include <mutex>
#include <string>

#include "engine/distribute/communicator.h"

namespace tandem::distribute {

class SoloCommunicator final : public Communicator {
 public:
  explicit SoloCommunicator(Device device) : device_(device) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Device device() const override { return device_; }

  // Checks the arguments as a real group would (device, dtype, sizes, root), then does the one
  // rank's part: nothing, or for all_gather a copy of x into out ordered on the tag's stream.
  CollectiveHandle all_reduce_async(const Tensor& x, ReduceOp op, CollectiveTag tag = {}) override;
  CollectiveHandle broadcast_async(const Tensor& x, int root, CollectiveTag tag = {}) override;
  CollectiveHandle all_gather_async(const Tensor& x, const Tensor& out, CollectiveTag tag = {}) override;
  // Later collectives throw Aborted with the first reason.
  void abort(const std::string& reason) noexcept override;

 protected:
  void wait(uint64_t sequence) override;
  bool is_done(uint64_t) override { return true; }

 private:
  void check(const Tensor& x, std::string_view what) const;
  CollectiveHandle done();

  Device device_;
  std::mutex mutex_;
  std::string aborted_;  // the first abort's reason; empty while running
  uint64_t sequence_ = 0;
};

}  // namespace tandem::distribute
