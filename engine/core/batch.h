// What a training loop reads: batches of named tensors from one replica's shard of the data.
// The interface lives in core so that data/ (the pipeline's bridge) can implement it and the
// training loop can read it without either depending on the other.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/context.h"
#include "engine/core/tensor.h"

namespace tandem {

// A batch: tensors by name ("image" and "label" for image classification, "tokens" for a text
// model, ...), each with the batch as its leading dimension. Setting a name that is there
// replaces its tensor in place, so a batch reused across steps allocates nothing.
class Batch {
 public:
  void set(std::string_view name, Tensor tensor);
  // The tensor of that name; InvalidArgument naming the tensors the batch has when it is missing.
  const Tensor& at(std::string_view name) const;
  const Tensor* find(std::string_view name) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  // The leading dimension of the first tensor: the number of examples (0 when empty).
  int64_t size() const;
  bool empty() const { return tensors_.empty(); }
  const std::vector<std::pair<std::string, Tensor>>& tensors() const { return tensors_; }
  // "image f32[128, 1, 28, 28] cpu, label i64[128] cpu", for error messages.
  std::string describe() const;
  void clear() { tensors_.clear(); }

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

// One replica's batches, epoch by epoch.
//
// Exact resume rests on one promise: start_epoch(e) followed by next() calls gives the same
// batches in the same order for the same epoch, whatever came before (a fresh process, another
// epoch first). A resumed run calls start_epoch(e) and skips the batches the checkpoint had
// trained; the trainer checks the last skipped batch against a fingerprint saved with the
// checkpoint and stops with an error naming the replica and batch when they differ.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The replica's context, given once by its thread before the first epoch: a source whose batches
  // come from the host copies them to ctx.device(), ordered with ctx.stream().
  virtual void bind(ExecutionContext& ctx) { (void)ctx; }
  // Starts a pass over this replica's shard; the order may depend on the epoch (reshuffling).
  virtual void start_epoch(int64_t epoch) = 0;
  // The next batch of this epoch; false when the shard is exhausted. Errors (a corrupt record)
  // are thrown here with their file and offset. The batch passed in is the previous one, to
  // be overwritten (Batch::set reuses its entries).
  virtual bool next(Batch& batch) = 0;
  // Seconds this source spent copying batches to the device so far (0 on the CPU), for the
  // step-time breakdown.
  virtual double copy_seconds() const { return 0.0; }
};

// A CRC32C over every tensor's name, dtype, shape and bytes (read back to the host): equal
// batches, equal fingerprints. The resume check of BatchSource's promise.
uint32_t batch_fingerprint(const Batch& batch);

}  // namespace tandem
