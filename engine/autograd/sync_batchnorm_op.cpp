// SyncBatchNorm: each replica reduces its own batch to per-channel (mean, M2, count), the
// replicas exchange those, and every replica merges them in rank order (Chan et al.'s pairwise
// update, in double), so the global statistics are bitwise equal everywhere. The normalisation
// itself is the backend's inference kernel fed with the global statistics. Every step runs on the
// replica's device (backend::batchnorm_moments and friends) and the exchange on its communicator:
// nothing is read back to the host unless this replica holds a single value per channel.
#include "engine/autograd/sync_batchnorm_op.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "engine/backend/ops.h"

namespace tandem::autograd {
namespace {

// Training needs more than one value per channel over all replicas. This replica's count is known
// here; only when it alone could not settle the question is the merged count read back.
void check_count(const Tensor& x, const Tensor& count, int replicas) {
  const int64_t local = x.dim(0) * x.dim(2) * x.dim(3);
  if (local > 1) return;
  const double total = count.to(Device::cpu()).to_vector()[0];
  TANDEM_CHECK(total > 1, ErrorCode::kInvalidArgument,
               "SyncBatchNorm: {} value(s) per channel across {} replicas; training needs more than 1 (x is {})",
               total, replicas, x.describe());
}

struct SyncSaved {
  Tensor x, y, gamma, mean, invstd, count;
  backend::BatchNormParams params;
  bool need_dx = true;
};

std::vector<Tensor> sync_backward(ExecutionContext& ctx, const SyncSaved& s, const Tensor& dy_in,
                                  ReplicaReducer& reducer) {
  const ContextBinding binding(ctx);  // the collective follows, and ctx's stream waits for, ctx's kernels
  Tensor dy = dy_in.format() == s.x.format() ? dy_in : dy_in.to_format(s.x.format());
  backend::BatchNormReduced local = backend::batchnorm_backward_reduce(ctx, s.params, s.x, s.y, dy, s.mean, s.invstd);
  // dgamma and dbeta stay this replica's share (the gradient buckets sum them); dx needs the sums of
  // every replica. All replicas all-reduce, need_dx or not, so the collectives stay in step.
  reducer.all_reduce_sum(local.sums);
  if (!s.need_dx) return {Tensor(), local.dgamma, local.dbeta};
  Tensor dx =
      backend::batchnorm_backward_elemt(ctx, s.params, s.x, s.y, dy, s.gamma, s.mean, s.invstd, local.sums, s.count);
  return {dx, local.dgamma, local.dbeta};
}

}  // namespace

Variable sync_batchnorm_training(ExecutionContext& ctx, const Variable& x, const Variable& gamma,
                                 const Variable& beta, Tensor& running_mean, Tensor& running_var,
                                 const backend::BatchNormParams& params, ReplicaReducer& reducer) {
  const Tensor& x_in = x.value();
  TANDEM_CHECK(x_in.defined() && x_in.rank() == 4 && (x_in.dtype() == DType::kF32 || x_in.dtype() == DType::kBF16),
               ErrorCode::kInvalidArgument, "SyncBatchNorm takes f32 or bf16 (N, C, H, W) tensors, got {}",
               x_in.defined() ? x_in.describe() : std::string("undefined"));
  // A convolution's bf16 output (bf16 activations) is widened: SyncBatchNorm computes in f32.
  Tensor xv = x_in;
  if (x_in.dtype() == DType::kBF16) {
    xv = Tensor::empty(x_in.shape(), DType::kF32, x_in.device(), x_in.format());
    backend::widen_from_bf16(ctx, x_in, xv);
  }
  const int64_t channels = xv.dim(1);
  const std::initializer_list<const Tensor*> per_channel{&gamma.value(), &beta.value(), &running_mean, &running_var};
  for (const Tensor* t : per_channel) {
    TANDEM_CHECK(t->dtype() == DType::kF32 && t->numel() == channels && t->device() == xv.device(),
                 ErrorCode::kInvalidArgument, "SyncBatchNorm: expected f32[{}] {} per-channel tensors for x {}, got {}",
                 channels, xv.device().str(), xv.describe(), t->describe());
  }
  // The collectives follow the current stream and make it wait: let that be ctx's, whichever
  // stream the calling thread had bound (the count's read below is ordered on it too).
  const ContextBinding binding(ctx);
  Tensor local = backend::batchnorm_moments(ctx, xv);
  const int replicas = reducer.world_size();
  Tensor gathered = Tensor::empty({replicas * local.numel()}, DType::kF32, xv.device());
  reducer.all_gather(local, gathered);
  backend::MergedMoments m =
      backend::batchnorm_merge_moments(ctx, params, gathered, channels, running_mean, running_var);
  check_count(xv, m.count, replicas);
  Tensor y = backend::batchnorm_forward_inference(ctx, params, xv, gamma.value(), beta.value(), m.mean, m.var);
  SyncSaved saved{xv, y, gamma.value(), m.mean, m.invstd, m.count, params, x.requires_grad()};
  return make_op("sync_batchnorm", std::move(y), {x, gamma, beta},
                 [&ctx, &reducer, saved](const Tensor& dy) { return sync_backward(ctx, saved, dy, reducer); });
}

}  // namespace tandem::autograd
