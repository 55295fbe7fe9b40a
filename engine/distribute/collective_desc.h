// What one rank says of one collective (kind, op, dtype, count, bucket, step), and the texts
// every communicator uses when ranks disagree or do not arrive.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "engine/distribute/communicator.h"

namespace tandem::distribute::detail {

// One rank's side of one collective: what every rank must agree on, and its buffers.
struct CollectiveDesc {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  ReduceOp op = ReduceOp::kSum;
  DType dtype = DType::kF32;
  int64_t count = 0;  // elements of the input (per rank for all_gather)
  int root = 0;       // broadcast only
  int bucket = -1;
  int64_t step = 0;
  uint64_t sequence = 0;  // this rank's collective number, from 1
  void* data = nullptr;   // the input (reduced in place for all_reduce)
  void* out = nullptr;    // all_gather's output
};

// "all_reduce(sum, 1000 x f32, bucket 3) #17 at step 12"
std::string describe(const CollectiveDesc& desc);

// What every communicator checks and says alike (the CPU rendezvous and NCCL's launch record):
// whether two ranks' collectives agree (kind, dtype, count, bucket, step, and the op or root
// where it matters; not the sequence), the mismatch error's text, and the watchdog's text for
// ranks that did not arrive.
bool same_collective(const CollectiveDesc& a, const CollectiveDesc& b);
std::string mismatch_message(int rank_a, const CollectiveDesc& a, int rank_b, const CollectiveDesc& b);
std::string not_arrived_message(const std::string& missing, const CollectiveDesc& waiting_in,
                                std::chrono::milliseconds timeout, int waiting_rank);

}  // namespace tandem::distribute::detail
