// SyncBatchNorm's differentiable op: batch statistics over the global batch of every replica,
// as torch.nn.SyncBatchNorm computes them. The cross-replica exchange is an interface here
// (autograd sits below engine/distribute); distribute implements it over a Communicator.
#pragma once

#include "engine/autograd/variable.h"
#include "engine/backend/op_params.h"

namespace tandem::autograd {

// The two collectives SyncBatchNorm needs. Every replica calls them in the same order.
class ReplicaReducer {
 public:
  virtual ~ReplicaReducer() = default;
  virtual int world_size() const = 0;
  // x: (n) f32 on the replica's device; out: (world_size * n) f32 there, every replica's x in rank
  // order. On a GPU both calls may return before the exchange is done: work queued afterwards on
  // the calling thread's current stream follows it.
  virtual void all_gather(const Tensor& x, const Tensor& out) = 0;
  // x: (n) f32 on the replica's device, replaced by the sum over replicas (bitwise equal everywhere).
  virtual void all_reduce_sum(const Tensor& x) = 0;
};

// Training-mode batch norm of (N, C, H, W) x (NCHW or channels_last, any device) with the mean and
// biased variance of all replicas' batches together; running statistics are updated with them
// (unbiased variance, as PyTorch), so they stay bitwise equal across replicas. Forward costs one
// all-gather of 2C+1 floats, backward one all-reduce of 2C floats. The gradient assumes the
// replicas' losses are summed (DESIGN.md's contract: each divides by the global batch size).
Variable sync_batchnorm_training(ExecutionContext& ctx, const Variable& x, const Variable& gamma,
                                 const Variable& beta, Tensor& running_mean, Tensor& running_var,
                                 const backend::BatchNormParams& params, ReplicaReducer& reducer);

}  // namespace tandem::autograd
