// SyncBatchNorm's collectives, and the walk that converts a model's BatchNorm layers.
#include "engine/distribute/sync_batchnorm.h"

#include "engine/nn/layers.h"

namespace tandem::distribute {

CommunicatorReducer::CommunicatorReducer(Communicator& comm) : comm_(&comm) {
  TANDEM_CHECK(comm.device().is_cpu(), ErrorCode::kUnimplemented,
               "SyncBatchNorm runs on CPU replicas only so far (communicator on {}); set "
               "distribute.sync_batchnorm: false",
               comm.device().str());
}

void CommunicatorReducer::all_gather(const Tensor& x, const Tensor& out) { comm_->all_gather(x, out); }

void CommunicatorReducer::all_reduce_sum(const Tensor& x) { comm_->all_reduce(x, ReduceOp::kSum); }

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
