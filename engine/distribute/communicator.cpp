// Names of the collectives and reduce ops for messages, and the handle's forwarding to its owner.
#include "engine/distribute/communicator.h"

namespace tandem::distribute {

std::string_view reduce_op_name(ReduceOp op) {
  return op == ReduceOp::kSum ? "sum" : "average";
}

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllGather: return "all_gather";
  }
  return "collective";
}

void CollectiveHandle::wait() const {
  TANDEM_CHECK(owner_ != nullptr, ErrorCode::kFailedPrecondition, "wait on an empty collective handle");
  owner_->wait(sequence_);
}

void CollectiveHandle::wait_on(Stream& stream) const {
  TANDEM_CHECK(owner_ != nullptr, ErrorCode::kFailedPrecondition, "wait_on on an empty collective handle");
  owner_->stream_wait(sequence_, stream);
}

bool CollectiveHandle::done() const {
  TANDEM_CHECK(owner_ != nullptr, ErrorCode::kFailedPrecondition, "done() on an empty collective handle");
  return owner_->is_done(sequence_);
}

}  // namespace tandem::distribute
