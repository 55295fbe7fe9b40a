// The meeting point of the CPU replica threads: each collective publishes what it is (kind,
// size, bucket, step) and where its buffer lies, then waits for the others with a deadline.
// It is also where the group's first failure (watchdog, abort, mismatch) is kept and spread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/distribute/collective_desc.h"
#include "engine/distribute/communicator.h"

namespace tandem::distribute::detail {

class Rendezvous {
 public:
  Rendezvous(int world_size, std::chrono::milliseconds timeout);

  int world_size() const { return world_size_; }
  // Publishes desc as this rank's current collective, waits until every rank has published
  // its own, and checks that they match. Throws the group's failure, DeadlineExceeded naming
  // the ranks that did not arrive, or FailedPrecondition naming two ranks that disagree.
  void arrive(int rank, const CollectiveDesc& desc);
  // A barrier between the phases of the current collective (same deadline and failure rules).
  void sync(int rank);
  // The collective rank `rank` published; valid from arrive() until the last sync() of it.
  const CollectiveDesc& desc(int rank) const { return slots_[static_cast<size_t>(rank)]; }

  // Records the first failure and wakes everyone; later calls keep the first cause.
  void fail(ErrorCode code, const std::string& message) noexcept;
  // Throws Error(code of the first failure) with its message, prefixed by who saw it, if any.
  void throw_if_failed(int rank) const;

 private:
  void barrier(int rank, std::unique_lock<std::mutex>& lock);
  [[noreturn]] void throw_failure(int rank) const;
  std::string missing_ranks(uint64_t my_count) const;
  void check_match() const;

  const int world_size_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;  // barriers completed by the whole group
  int arrived_ = 0;          // ranks waiting at the current barrier
  std::vector<uint64_t> entered_;  // barriers each rank has entered, to name the missing ones
  std::vector<CollectiveDesc> slots_;
  bool failed_ = false;
  ErrorCode failure_code_ = ErrorCode::kAborted;
  std::string failure_;
};

}  // namespace tandem::distribute::detail
