// The Communicator of CPU replicas: R replica threads share one CpuCommunicatorGroup; each gets
// its own CpuCommunicator, whose worker thread runs that rank's collectives in order, reading the
// other ranks' buffers directly in shared memory. Sums run in rank order. With a ProcessLink the
// group spans processes: reduce inside the process first, then across processes (each local rank
// its own chunk, on its own Gloo channel), then share the result; ranks are global
// (process rank x R + local rank).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/distribute/collective_desc.h"
#include "engine/distribute/communicator.h"

namespace tandem::distribute {
namespace detail {
class Rendezvous;  // cpu_rendezvous.h, internal
}
class ProcessLink;  // process_link.h, internal

class CpuCommunicatorGroup;

class CpuCommunicator final : public Communicator {
 public:
  ~CpuCommunicator() override;

  int rank() const override { return base_rank_ + rank_; }
  int world_size() const override;
  Device device() const override { return Device::cpu(); }

  CollectiveHandle all_reduce_async(const Tensor& x, ReduceOp op, CollectiveTag tag = {}) override;
  CollectiveHandle broadcast_async(const Tensor& x, int root, CollectiveTag tag = {}) override;
  CollectiveHandle all_gather_async(const Tensor& x, const Tensor& out, CollectiveTag tag = {}) override;
  void abort(const std::string& reason) noexcept override;
  // Seconds this rank has spent in collectives across processes (0 in a single process).
  double across_seconds() const { return static_cast<double>(across_ns_.load(std::memory_order_relaxed)) * 1e-9; }

 protected:
  void wait(uint64_t sequence) override;
  bool is_done(uint64_t sequence) override;

 private:
  friend class CpuCommunicatorGroup;
  // A queued collective. The tensors keep the buffers alive until it has run.
  struct Work {
    detail::CollectiveDesc desc;
    Tensor x, out;
  };
  static constexpr size_t kQueueCapacity = 256;

  CpuCommunicator(int rank, std::shared_ptr<detail::Rendezvous> rendezvous, ProcessLink* link, bool ordered);
  CollectiveHandle enqueue(detail::CollectiveDesc desc, const Tensor& x, const Tensor& out);
  void worker_loop();
  void run(const detail::CollectiveDesc& desc);
  void run_all_reduce(const detail::CollectiveDesc& desc);
  void run_broadcast(const detail::CollectiveDesc& desc);
  void run_all_gather(const detail::CollectiveDesc& desc);
  // The cross-process phases (link_ set): this rank's chunk summed over processes, or gathered and
  // summed in global rank order (ordered_); the broadcast and all-gather through local rank 0.
  void reduce_chunk_across(const detail::CollectiveDesc& desc, int64_t lo, int64_t hi);
  // The same for bf16 buffers (distribute.allreduce_dtype: bf16).
  void reduce_chunk_across_bf16(const detail::CollectiveDesc& desc, int64_t lo, int64_t hi);
  // This rank's chunk [lo, hi) of an all-reduce, summed over every rank (the all-gather that
  // follows is the same bytes for either type).
  void reduce_scatter_f32(const detail::CollectiveDesc& desc, int64_t lo, int64_t hi);
  void reduce_scatter_bf16(const detail::CollectiveDesc& desc, int64_t lo, int64_t hi);
  void broadcast_across(const detail::CollectiveDesc& desc);
  void all_gather_across(const detail::CollectiveDesc& desc);
  // Runs a cross-process call; its failure stops the local ranks too and names the collective.
  template <typename F>
  void across(const detail::CollectiveDesc& desc, F&& f);

  const int rank_;  // local: the index among this process's ranks
  std::shared_ptr<detail::Rendezvous> rendezvous_;
  ProcessLink* link_;      // null in a single process
  const bool ordered_;     // sums in global rank order, bitwise equal to a single process's
  int base_rank_ = 0;      // process rank x local ranks
  std::vector<unsigned char> staging_;  // cross-process buffers, grown once to the largest size
  std::vector<const float*> gathered_;  // ordered all_reduce: every global rank's chunk
  std::atomic<int64_t> across_ns_{0};
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<const float*> sources_;  // all_reduce: each rank's buffer, sized once
  std::vector<const uint16_t*> sources16_, gathered16_;  // the same of a bf16 all_reduce
  std::vector<Work> queue_;  // a ring of kQueueCapacity, so launching allocates nothing
  uint64_t launched_ = 0;    // sequence of the last launched collective
  uint64_t completed_ = 0;   // every collective up to this one has finished (or failed)
  uint64_t failed_from_ = 0; // first sequence that failed (0: none); it and all later rethrow error_
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread worker_;
};

// Creates the R communicators of one process's CPU replicas and owns them.
class CpuCommunicatorGroup {
 public:
  explicit CpuCommunicatorGroup(int world_size, CommunicatorOptions options = {});
  // local_ranks ranks in this process, spanning every process of `link` (which must outlive the
  // group and have local_ranks channels); every process must have the same local_ranks. ordered:
  // sums in global rank order (what deterministic: true asks), at the cost of gathering every
  // rank's chunk instead of a ring all-reduce.
  CpuCommunicatorGroup(int local_ranks, CommunicatorOptions options, ProcessLink& link, bool ordered);
  ~CpuCommunicatorGroup();
  CpuCommunicatorGroup(const CpuCommunicatorGroup&) = delete;
  CpuCommunicatorGroup& operator=(const CpuCommunicatorGroup&) = delete;

  int world_size() const { return static_cast<int>(ranks_.size()); }  // in this process
  CpuCommunicator& communicator(int rank);  // by local rank
  // Stops every rank (see Communicator::abort); for a failure outside any one replica.
  void abort(const std::string& reason) noexcept;

 private:
  void init(int local_ranks, CommunicatorOptions options, ProcessLink* link, bool ordered);

  std::shared_ptr<detail::Rendezvous> rendezvous_;
  std::vector<std::unique_ptr<CpuCommunicator>> ranks_;
};

}  // namespace tandem::distribute
