// The in-process Communicator of CPU replicas: R replica threads share one CpuCommunicatorGroup;
// each gets its own CpuCommunicator, whose worker thread runs that rank's collectives in order,
// reading the other ranks' buffers directly in shared memory. Sums run in rank order.
#pragma once

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

class CpuCommunicatorGroup;

class CpuCommunicator final : public Communicator {
 public:
  ~CpuCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override;
  Device device() const override { return Device::cpu(); }

  CollectiveHandle all_reduce_async(const Tensor& x, ReduceOp op, CollectiveTag tag = {}) override;
  CollectiveHandle broadcast_async(const Tensor& x, int root, CollectiveTag tag = {}) override;
  CollectiveHandle all_gather_async(const Tensor& x, const Tensor& out, CollectiveTag tag = {}) override;
  void abort(const std::string& reason) noexcept override;

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

  CpuCommunicator(int rank, std::shared_ptr<detail::Rendezvous> rendezvous);
  CollectiveHandle enqueue(detail::CollectiveDesc desc, const Tensor& x, const Tensor& out);
  void worker_loop();
  void run(const detail::CollectiveDesc& desc);
  void run_all_reduce(const detail::CollectiveDesc& desc);
  void run_broadcast(const detail::CollectiveDesc& desc);
  void run_all_gather(const detail::CollectiveDesc& desc);

  const int rank_;
  std::shared_ptr<detail::Rendezvous> rendezvous_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<const float*> sources_;  // all_reduce: each rank's buffer, sized once
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
  ~CpuCommunicatorGroup();
  CpuCommunicatorGroup(const CpuCommunicatorGroup&) = delete;
  CpuCommunicatorGroup& operator=(const CpuCommunicatorGroup&) = delete;

  int world_size() const { return static_cast<int>(ranks_.size()); }
  CpuCommunicator& communicator(int rank);
  // Stops every rank (see Communicator::abort); for a failure outside any one replica.
  void abort(const std::string& reason) noexcept;

 private:
  std::shared_ptr<detail::Rendezvous> rendezvous_;
  std::vector<std::unique_ptr<CpuCommunicator>> ranks_;
};

}  // namespace tandem::distribute
