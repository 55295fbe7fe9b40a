// SyncBatchNorm's collectives, and the walk that converts a model's BatchNorm layers.
#include "engine/distribute/sync_batchnorm.h"

#include "engine/core/device.h"
#include "engine/nn/layers.h"

namespace tandem::distribute {

CommunicatorReducer::CommunicatorReducer(Communicator& comm) : comm_(&comm) {}

void CommunicatorReducer::all_gather(const Tensor& x, const Tensor& out) { follow(comm_->all_gather_async(x, out)); }

void CommunicatorReducer::all_reduce_sum(const Tensor& x) { follow(comm_->all_reduce_async(x, ReduceOp::kSum)); }

void CommunicatorReducer::follow(const CollectiveHandle& handle) const {
  // The collective started after the work queued on the thread's current stream (NCCL's default
  // ordering); the stream now waits for it, so the statistics never visit the host.
  Stream* stream = current_stream();
  if (stream != nullptr && !comm_->device().is_cpu() && stream->device() == comm_->device()) {
    handle.wait_on(*stream);
  } else {
    handle.wait();
  }
}

namespace {

int convert(nn::Module& module, const std::shared_ptr<CommunicatorReducer>& reducer) {
  int converted = 0;
  if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&module)) {
    bn->set_replica_reducer(reducer);
    ++converted;
  }
  for (auto& [name, child] : module.named_children()) converted += convert(*child, reducer);
  return converted;
}

}  // namespace

int convert_sync_batchnorm(nn::Module& module, Communicator& comm) {
  return convert(module, std::make_shared<CommunicatorReducer>(comm));
}

}  // namespace tandem::distribute
