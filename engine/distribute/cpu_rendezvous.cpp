// The CPU replicas' meeting point: a generation barrier under one mutex, with a deadline per
// wait. The mutex also orders every buffer read across ranks after the writes before it.
#include "engine/distribute/cpu_rendezvous.h"

#include <fmt/format.h>

namespace tandem::distribute::detail {

std::string describe(const CollectiveDesc& desc) {
  std::string what;
  switch (desc.kind) {
    case CollectiveKind::kAllReduce:
      what = fmt::format("all_reduce({}, {} x {}", reduce_op_name(desc.op), desc.count, dtype_name(desc.dtype));
      break;
    case CollectiveKind::kBroadcast:
      what = fmt::format("broadcast(root {}, {} x {}", desc.root, desc.count, dtype_name(desc.dtype));
      break;
    case CollectiveKind::kAllGather:
      what = fmt::format("all_gather({} x {} per rank", desc.count, dtype_name(desc.dtype));
      break;
  }
  if (desc.bucket >= 0) what += fmt::format(", bucket {}", desc.bucket);
  return fmt::format("{}) #{} at step {}", what, desc.sequence, desc.step);
}

Rendezvous::Rendezvous(int world_size, std::chrono::milliseconds timeout)
    : world_size_(world_size),
      timeout_(timeout),
      entered_(static_cast<size_t>(world_size), 0),
      slots_(static_cast<size_t>(world_size)) {}

void Rendezvous::arrive(int rank, const CollectiveDesc& desc) {
  std::unique_lock lock(mutex_);
  if (failed_) throw_failure(rank);
  slots_[static_cast<size_t>(rank)] = desc;
  barrier(rank, lock);
  lock.unlock();
  check_match();
}

void Rendezvous::sync(int rank) {
  std::unique_lock lock(mutex_);
  barrier(rank, lock);
}

void Rendezvous::barrier(int rank, std::unique_lock<std::mutex>& lock) {
  if (failed_) throw_failure(rank);
  uint64_t my_count = ++entered_[static_cast<size_t>(rank)];
  uint64_t generation = generation_;
  if (++arrived_ == world_size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (generation_ == generation && !failed_) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && generation_ == generation && !failed_) {
      const CollectiveDesc& mine = slots_[static_cast<size_t>(rank)];
      failed_ = true;
      failure_code_ = ErrorCode::kDeadlineExceeded;
      failure_ = not_arrived_message(missing_ranks(my_count), mine, timeout_, rank);
      cv_.notify_all();
    }
  }
  if (failed_) throw_failure(rank);
}

std::string Rendezvous::missing_ranks(uint64_t my_count) const {
  std::string names;
  int missing = 0;
  for (int r = 0; r < world_size_; ++r) {
    if (entered_[static_cast<size_t>(r)] >= my_count) continue;
    const CollectiveDesc& last = slots_[static_cast<size_t>(r)];
    names += fmt::format("{}replica {} (its last collective: {})", missing++ ? ", " : "", r,
                         last.sequence == 0 ? std::string("none") : describe(last));
  }
  return names;
}

bool same_collective(const CollectiveDesc& a, const CollectiveDesc& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.count == b.count && a.bucket == b.bucket && a.step == b.step &&
         (a.kind != CollectiveKind::kAllReduce || a.op == b.op) &&
         (a.kind != CollectiveKind::kBroadcast || a.root == b.root);
}

std::string mismatch_message(int rank_a, const CollectiveDesc& a, int rank_b, const CollectiveDesc& b) {
  return fmt::format(
      "mismatched collectives: replica {} called {} while replica {} called {}; every replica must call the same "
      "collectives with the same sizes in the same order",
      rank_a, describe(a), rank_b, describe(b));
}

std::string not_arrived_message(const std::string& missing, const CollectiveDesc& waiting_in,
                                std::chrono::milliseconds timeout, int waiting_rank) {
  return fmt::format(
      "watchdog: {} did not arrive at {} within {:.3f} s (replica {} waited); a replica that stops calling "
      "collectives (a hang, an endless loop, an uneven input) stops the group; the timeout is "
      "CommunicatorOptions::timeout",
      missing, describe(waiting_in), std::chrono::duration<double>(timeout).count(), waiting_rank);
}

void Rendezvous::check_match() const {
  // Every rank runs the same comparison on the same slots, so all of them throw or none does.
  const CollectiveDesc& a = slots_[0];
  for (int r = 1; r < world_size_; ++r) {
    const CollectiveDesc& b = slots_[static_cast<size_t>(r)];
    if (!same_collective(a, b) || a.sequence != b.sequence) {
      auto message = mismatch_message(0, a, r, b);
      const_cast<Rendezvous*>(this)->fail(ErrorCode::kFailedPrecondition, message);
      throw Error(ErrorCode::kFailedPrecondition, message);
    }
  }
}

void Rendezvous::fail(ErrorCode code, const std::string& message) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (failed_) return;
    failed_ = true;
    failure_code_ = code;
    try {
      failure_ = message;
    } catch (...) {
      failure_.clear();  // out of memory for the text: the group still stops
    }
  }
  cv_.notify_all();
}

void Rendezvous::throw_if_failed(int rank) const {
  std::lock_guard lock(mutex_);
  if (failed_) throw_failure(rank);
}

void Rendezvous::throw_failure(int rank) const {
  throw Error(failure_code_, fmt::format("replica {} stopped: {}", rank, failure_));
}

}  // namespace tandem::distribute::detail
