// The Communicator of GPU replicas: NCCL through the CUDA plugin's DeviceCollectives (one NCCL
// communicator per device from ncclCommInitAll, one stream per rank, grouped calls), adapted to
// the Communicator interface. A handle is an event recorded on the rank's collective stream after
// the collective; `tag.after` becomes an event wait of that stream on the caller's stream; wait()
// polls the event and is the watchdog: past the timeout it stops the group naming the replica that
// did not arrive. No CUDA header here: the plugin is dlopen'ed, so this builds everywhere and
// fails with Unavailable, saying why, where there is no plugin or no GPU.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/backend/plugin_abi.h"
#include "engine/distribute/communicator.h"
#include "engine/distribute/cpu_rendezvous.h"

namespace tandem::distribute {

namespace detail {
class NcclGroupState;
}
class ProcessLink;  // process_link.h

class NcclCommunicator final : public Communicator {
 public:
  ~NcclCommunicator() override;

  int rank() const override;        // global: the first rank of this process + the local one
  int world_size() const override;  // every process's ranks
  Device device() const override { return device_; }
  // Where this rank's collectives run; a consumer of a result may wait on it instead of the host.
  Stream& stream() { return *stream_; }

  // x (and out) must live on device(); f32 for all_reduce. The launch returns once the work is
  // queued on stream(), after the work queued so far on tag.after, if given.
  CollectiveHandle all_reduce_async(const Tensor& x, ReduceOp op, CollectiveTag tag = {}) override;
  CollectiveHandle broadcast_async(const Tensor& x, int root, CollectiveTag tag = {}) override;
  CollectiveHandle all_gather_async(const Tensor& x, const Tensor& out, CollectiveTag tag = {}) override;
  void abort(const std::string& reason) noexcept override;

 protected:
  void wait(uint64_t sequence) override;
  bool is_done(uint64_t sequence) override;
  void stream_wait(uint64_t sequence, Stream& stream) override;

 private:
  friend class NcclCommunicatorGroup;
  // Launched collectives in flight: a ring, so a launch allocates nothing. A full ring waits for
  // its oldest entry (back-pressure, under the watchdog).
  static constexpr size_t kRing = 64;
  struct Entry {
    detail::CollectiveDesc desc;
    std::unique_ptr<Event> done;  // recorded on stream() after the collective; created once
    Tensor x, out;                // keep the buffers alive until the collective is complete
    std::chrono::steady_clock::time_point launched_at;
  };

  NcclCommunicator(int rank, std::shared_ptr<detail::NcclGroupState> group, DeviceServices& services);
  void check_tensor(const Tensor& x, std::string_view what) const;
  CollectiveHandle launch(detail::CollectiveDesc desc, const Tensor& x, const Tensor& out, Stream* after);
  void enqueue(const detail::CollectiveDesc& desc, const Tensor& x, const Tensor& out, Stream* after);
  // Marks complete, in order, every launched collective whose event has happened; true once
  // `sequence` is complete. Throws the group's failure for a sequence that cannot complete.
  bool poll(uint64_t sequence);
  // Throws (and stops the group) on NCCL's asynchronous error or when the oldest incomplete
  // collective is overdue, naming the replicas that have not launched it.
  void watchdog();
  void wait_locked(uint64_t sequence, std::unique_lock<std::mutex>& lock);
  [[noreturn]] void throw_failed();
  void drain() noexcept;  // waits out (or fails) what is pending, for the group's destructor
  // The group's watchdog thread: marks what has completed and, when the oldest incomplete collective
  // is overdue or NCCL reports an error, fails the group (which aborts NCCL). Replica threads that
  // only wait on the device (CollectiveHandle::wait_on), or block in a stream synchronisation behind
  // a collective, are unblocked this way.
  void supervise() noexcept;

  const int rank_;
  const Device device_;
  std::shared_ptr<detail::NcclGroupState> group_;
  Stream* stream_;
  std::unique_ptr<Event> after_;  // recorded on tag.after, waited by stream(); reused each launch
  std::mutex mutex_;
  std::vector<Entry> ring_;
  uint64_t launched_ = 0;     // sequence of the last launched collective
  uint64_t completed_ = 0;    // every collective up to this one is complete
  uint64_t failed_from_ = 0;  // first sequence failed with the group (0: none)
};

// Creates the NCCL communicators of one process's GPU replicas and owns them.
class NcclCommunicatorGroup {
 public:
  // Loads the CUDA plugin and creates one NCCL communicator per entry of devices (CUDA device
  // indices, distinct). Throws Unavailable naming the cause (no plugin, no driver, no GPU, an
  // older plugin) and pointing at `trainer doctor`; InvalidArgument for a bad device list.
  explicit NcclCommunicatorGroup(std::vector<int> devices, CommunicatorOptions options = {});
  // One communicator over the devices of every process of `link` (the same count on each): this
  // process's ranks start at link.rank() x devices.size(); process 0's NCCL unique id travels
  // through the rendezvous.
  NcclCommunicatorGroup(std::vector<int> devices, CommunicatorOptions options, ProcessLink& link);
  // Over collectives already made (tests drive the adapter with simulated ones); `services`
  // makes the events of the ranks' streams.
  NcclCommunicatorGroup(std::unique_ptr<backend::DeviceCollectives> collectives, DeviceServices& services,
                        CommunicatorOptions options = {});
  ~NcclCommunicatorGroup();
  NcclCommunicatorGroup(const NcclCommunicatorGroup&) = delete;
  NcclCommunicatorGroup& operator=(const NcclCommunicatorGroup&) = delete;

  int world_size() const { return static_cast<int>(ranks_.size()); }  // in this process
  NcclCommunicator& communicator(int rank);  // by local rank
  // Stops every rank (see Communicator::abort); for a failure outside any one replica.
  void abort(const std::string& reason) noexcept;

 private:
  void init(std::unique_ptr<backend::DeviceCollectives> collectives, DeviceServices& services,
            CommunicatorOptions options);
  void supervise_until_stopped(std::chrono::milliseconds period);

  std::shared_ptr<detail::NcclGroupState> state_;
  std::vector<std::unique_ptr<NcclCommunicator>> ranks_;
  std::mutex stop_mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread watchdog_;  // last: started once the ranks exist, joined first
};

}  // namespace tandem::distribute
