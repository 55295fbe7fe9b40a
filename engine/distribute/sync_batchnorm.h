// SyncBatchNorm over a Communicator: the replica reducer BatchNorm layers use for global batch
// statistics, and convert_sync_batchnorm, which hands it to every BatchNorm2d of a model
// (torch.nn.SyncBatchNorm.convert_sync_batchnorm's role).
#pragma once

#include <memory>

#include "engine/autograd/sync_batchnorm_op.h"
#include "engine/distribute/communicator.h"
#include "engine/nn/module.h"

namespace tandem::distribute {

// The two collectives of SyncBatchNorm on this replica's communicator: host tensors on CPU
// replicas, device tensors over NCCL on GPU replicas (where the replica's stream, not its host
// thread, waits for them).
class CommunicatorReducer final : public autograd::ReplicaReducer {
 public:
  explicit CommunicatorReducer(Communicator& comm);
  int world_size() const override { return comm_->world_size(); }
  void all_gather(const Tensor& x, const Tensor& out) override;
  void all_reduce_sum(const Tensor& x) override;

 private:
  void follow(const CollectiveHandle& handle) const;

  Communicator* comm_;
};

// Makes every BatchNorm2d in module (at any depth) compute its training statistics across the
// communicator's replicas; returns how many layers it converted. Every replica must convert the
// same model, since each layer adds collectives to the step.
int convert_sync_batchnorm(nn::Module& module, Communicator& comm);

}  // namespace tandem::distribute
