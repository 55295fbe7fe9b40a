// Communicator: the collectives that keep data-parallel replicas identical (all-reduce,
// broadcast, all-gather), one object per rank, as NCCL's one-process multi-device mode has it:
// R replica threads, each calling with its own communicator, in the same order on every rank.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/core/device.h"
#include "engine/core/tensor.h"

namespace tandem::distribute {

enum class ReduceOp : uint8_t { kSum, kAverage };
enum class CollectiveKind : uint8_t { kAllReduce, kBroadcast, kAllGather };

std::string_view reduce_op_name(ReduceOp op);          // "sum", "average"
std::string_view collective_name(CollectiveKind kind);  // "all_reduce", ...

struct CommunicatorOptions {
  // How long a rank waits for the others at a collective before the watchdog stops the group
  // with DeadlineExceeded naming the replica that did not arrive.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// Where a collective sits in the step, for watchdog and mismatch messages, and what it follows.
struct CollectiveTag {
  int bucket = -1;          // the gradient bucket it reduces; -1 when it is not a bucket
  // Device work it must follow; when null, the calling thread's current stream (ExecutionContext::
  // bind) if it is on the communicator's device. CPU: unused.
  Stream* after = nullptr;
};

class Communicator;

// A launched collective. wait() blocks until it is complete and rethrows its error (the first
// cause when the group was stopped). Cheap to copy; valid until its communicator is destroyed.
class CollectiveHandle {
 public:
  CollectiveHandle() = default;
  void wait() const;
  // Work queued on `stream` from now on follows the collective: on a GPU the stream waits for it and
  // the host goes on (its failure surfaces at the next host wait); on the CPU this is wait().
  void wait_on(Stream& stream) const;
  bool done() const;  // true once complete or failed; never blocks
  bool valid() const { return owner_ != nullptr; }
  uint64_t sequence() const { return sequence_; }

 private:
  friend class Communicator;
  CollectiveHandle(Communicator* owner, uint64_t sequence) : owner_(owner), sequence_(sequence) {}
  Communicator* owner_ = nullptr;
  uint64_t sequence_ = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Device device() const = 0;  // where the tensors given to the collectives must live

  // The caller's step counter (the trainer sets it each step), named by watchdog errors.
  void set_step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }

  // Asynchronous launches: they return at once; the tensors must stay untouched until the
  // handle is done. x is reduced in place (f32, or bf16: distribute.allreduce_dtype); every rank
  // ends with bitwise equal values.
  virtual CollectiveHandle all_reduce_async(const Tensor& x, ReduceOp op, CollectiveTag tag = {}) = 0;
  // x on root is copied into x on every other rank (any dtype; the same shape everywhere).
  virtual CollectiveHandle broadcast_async(const Tensor& x, int root, CollectiveTag tag = {}) = 0;
  // out (world_size x x.numel() elements of x's dtype) receives every rank's x, in rank order.
  virtual CollectiveHandle all_gather_async(const Tensor& x, const Tensor& out, CollectiveTag tag = {}) = 0;

  // Synchronous conveniences: launch and wait.
  void all_reduce(const Tensor& x, ReduceOp op, CollectiveTag tag = {}) { all_reduce_async(x, op, tag).wait(); }
  void broadcast(const Tensor& x, int root, CollectiveTag tag = {}) { broadcast_async(x, root, tag).wait(); }
  void all_gather(const Tensor& x, const Tensor& out, CollectiveTag tag = {}) {
    all_gather_async(x, out, tag).wait();
  }

  // Stops the whole group: every rank blocked in, or later entering, a collective throws
  // Error(kAborted) naming this rank and reason (the first cause wins). Call it when this
  // replica fails (a bad record, out of memory) so the others stop instead of waiting.
  virtual void abort(const std::string& reason) noexcept = 0;

 protected:
  friend class CollectiveHandle;
  virtual void wait(uint64_t sequence) = 0;
  virtual bool is_done(uint64_t sequence) = 0;
  virtual void stream_wait(uint64_t sequence, Stream&) { wait(sequence); }
  CollectiveHandle make_handle(uint64_t sequence) { return CollectiveHandle(this, sequence); }

 private:
  std::atomic<int64_t> step_{0};
};

}  // namespace tandem::distribute
