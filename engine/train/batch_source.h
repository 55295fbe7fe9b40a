// What the training loop reads: batches of one replica's shard. tools/ adapts the data
// pipeline to this interface (engine/ does not depend on data/), and tests feed tensors.
#pragma once

#include <cstdint>

#include "engine/core/context.h"
#include "engine/core/tensor.h"

namespace tandem::train {

struct Batch {
  Tensor x;       // (N, C, H, W) f32 on the replica's device, in the model's memory format
  Tensor labels;  // (N) i64 on the replica's device
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The replica's context, given once by its thread before the first epoch: a source whose batches
  // come from the host copies them to ctx.device(), ordered with ctx.stream().
  virtual void bind(ExecutionContext& ctx) { (void)ctx; }
  // Starts a pass over this replica's shard; the order may depend on the epoch (reshuffling).
  virtual void start_epoch(int64_t epoch) = 0;
  // The next batch of this epoch; false when the shard is exhausted. Errors (a corrupt record)
  // are thrown here with their file and offset.
  virtual bool next(Batch& batch) = 0;
  // Seconds this source spent copying batches to the device so far (0 on the CPU), for the
  // step-time breakdown.
  virtual double copy_seconds() const { return 0.0; }
};

}  // namespace tandem::train
