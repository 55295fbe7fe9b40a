// GradientBucketer: the reducer of data parallelism, as PyTorch DDP's. Gradients are packed
// into flat buckets in reverse parameter order (the first small, so reduction starts early in
// backward), each all-reduced asynchronously the moment its last gradient is final.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/variable.h"
#include "engine/core/context.h"
#include "engine/distribute/communicator.h"

namespace tandem::distribute {

struct BucketOptions {
  size_t first_bucket_bytes = size_t{1} << 20;  // 1 MiB: the first all-reduce starts early in backward
  size_t bucket_bytes = size_t{25} << 20;       // then about 25 MiB each (DDP's bucket_cap_mb = 25)
  // The loss contract: each replica's loss is divided by the global batch and the gradients are
  // summed, so kSum by default; kAverage when each replica's loss is a mean over its own batch.
  ReduceOp op = ReduceOp::kSum;
  // kBF16 (distribute.allreduce_dtype: bf16): each bucket is rounded to bf16 for its all-reduce,
  // half the bytes, and widened back to f32 after it, on the replica's device (NCCL's bf16 sum on
  // GPUs, which adds in f32 and rounds each partial sum to bf16).
  DType wire_dtype = DType::kF32;
};

// One bucket: parameters (indices into the list given) in the order their gradients are packed.
struct Bucket {
  std::vector<int> params;
  std::vector<int64_t> offsets;  // element offset of each parameter in the flat buffer
  int64_t numel = 0;
};

// The bucket layout for parameters of these element counts (f32), in registration order: walk
// them from last to first, close a bucket once it reaches its limit (first_bucket_bytes for the
// first, bucket_bytes after), as DDP's compute_bucket_assignment_by_size does.
std::vector<Bucket> plan_buckets(const std::vector<int64_t>& param_numel, const BucketOptions& options);

class GradientBucketer {
 public:
  // parameters: the replica's named parameters in registration order (Module::named_parameters()),
  // f32, on ctx's device. Registers a grad-ready hook on each; buffers are allocated here, once.
  GradientBucketer(Communicator& comm, ExecutionContext& ctx,
                   std::vector<std::pair<std::string, autograd::Variable>> parameters, BucketOptions options = {});
  ~GradientBucketer();
  GradientBucketer(const GradientBucketer&) = delete;
  GradientBucketer& operator=(const GradientBucketer&) = delete;

  const std::vector<Bucket>& buckets() const;
  const std::string& parameter_name(int index) const;

  // After backward: waits for the buckets in launch order and sets each parameter's gradient to
  // the reduced one (a tensor owned here, reused every step), then rearms for the next step.
  // on_bucket(parameter indices), when given, runs as soon as a bucket's gradients are set,
  // before the next bucket is waited for: the optimizer updates those parameters while later
  // buckets are still being reduced. A parameter that got no gradient this step (unused in the
  // forward pass, on this replica or every one) gets zeros, reduced with its bucket in the same
  // order on every replica, so nothing hangs; it is named once in a warning.
  // on_wait(true) and on_wait(false) bracket each wait for a bucket (on a GPU, the replica stream's
  // wait), so a timer can measure how much of the all-reduce stays exposed.
  void finish(const std::function<void(const std::vector<int>&)>& on_bucket = {},
              const std::function<void(bool)>& on_wait = {});
  // Forgets the gradients of an interrupted step (an exception in forward or backward).
  void reset();
  // While off, the grad-ready hooks do nothing: gradients accumulate in the parameters over several
  // backward passes and only the pass made with it on reduces them (DDP's no_sync, for gradient
  // accumulation). On by default.
  void set_reducing(bool on);

 private:
  struct State;
  std::shared_ptr<State> state_;  // the hooks hold it weakly: a hook after destruction does nothing
};

}  // namespace tandem::distribute
