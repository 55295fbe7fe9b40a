#include "engine/distribute/solo_communicator.h"

#include <fmt/format.h>

namespace tandem::distribute {

void SoloCommunicator::check(const Tensor& x, std::string_view what) const {
  TANDEM_CHECK(x.defined(), ErrorCode::kInvalidArgument, "{}: undefined tensor", what);
  TANDEM_CHECK(x.device() == device_, ErrorCode::kInvalidArgument,
               "{}: {} is on {}, but the communicator works on {}", what, x.describe(), x.device().str(),
               device_.str());
}

CollectiveHandle SoloCommunicator::done() {
  std::lock_guard lock(mutex_);
  TANDEM_CHECK(aborted_.empty(), ErrorCode::kAborted, "collective after the group was stopped: {}", aborted_);
  return make_handle(++sequence_);
}

CollectiveHandle SoloCommunicator::all_reduce_async(const Tensor& x, ReduceOp, CollectiveTag) {
  check(x, "all_reduce");
  TANDEM_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16, ErrorCode::kInvalidArgument,
               "all_reduce reduces f32 or bf16 tensors, got {}", x.describe());
  return done();  // the sum (or average) over one rank is x itself
}

CollectiveHandle SoloCommunicator::broadcast_async(const Tensor& x, int root, CollectiveTag) {
  check(x, "broadcast");
  TANDEM_CHECK(root == 0, ErrorCode::kInvalidArgument, "broadcast: root {} is not a rank of this group of 1", root);
  return done();
}

CollectiveHandle SoloCommunicator::all_gather_async(const Tensor& x, const Tensor& out, CollectiveTag tag) {
  check(x, "all_gather");
  check(out, "all_gather output");
  TANDEM_CHECK(out.dtype() == x.dtype() && out.numel() == x.numel(), ErrorCode::kInvalidArgument,
               "all_gather: the output must hold 1 x {} elements of {}, got {}", x.numel(), dtype_name(x.dtype()),
               out.describe());
  CollectiveHandle handle = done();
  if (x.numel() > 0) {
    // out may have another shape with the same element count: copy through flat views of both.
    Tensor flat_out = out.view(Shape{out.numel()}, MemoryFormat::kContiguous);
    flat_out.copy_from(x.view(Shape{x.numel()}, MemoryFormat::kContiguous), tag.after);
  }
  return handle;
}

void SoloCommunicator::abort(const std::string& reason) noexcept {
  std::lock_guard lock(mutex_);
  if (aborted_.empty()) aborted_ = reason.empty() ? std::string("aborted") : reason;
}

void SoloCommunicator::wait(uint64_t) {
  std::lock_guard lock(mutex_);
  TANDEM_CHECK(aborted_.empty(), ErrorCode::kAborted, "the group was stopped: {}", aborted_);
}

}  // namespace tandem::distribute
