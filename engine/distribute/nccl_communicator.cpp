// NcclCommunicator: launches go straight to the plugin's DeviceCollectives on the rank's stream
// (NCCL queues the kernel and returns); completion is an event per launched collective, polled
// in launch order. The group keeps what every rank has launched, so a mismatch is caught before
// NCCL runs it and the watchdog can name the replica that never arrived.
#include "engine/distribute/nccl_communicator.h"

#include "engine/distribute/bootstrap/client.h"
#include "engine/distribute/process_link.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "engine/backend/plugin_loader.h"

namespace tandem::distribute {
namespace detail {

using namespace std::chrono_literals;

// What the ranks of one group share: the collectives, the first failure, and each rank's recent
// launches (for mismatch checks and the watchdog's message).
class NcclGroupState {
 public:
  NcclGroupState(std::unique_ptr<backend::DeviceCollectives> collectives, std::chrono::milliseconds timeout)
      : collectives_(std::move(collectives)),
        timeout_(timeout),
        launched_(static_cast<size_t>(collectives_->world_size()), 0),
        recent_(static_cast<size_t>(collectives_->world_size()), std::vector<CollectiveDesc>(kRecent)) {}

  backend::DeviceCollectives& collectives() { return *collectives_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  int world_size() const { return static_cast<int>(launched_.size()); }

  // Records desc as `rank`'s collective number desc.sequence and compares it with that collective
  // on every rank that launched it already: NCCL given different sizes would corrupt or hang.
  void arrive(int rank, const CollectiveDesc& desc) {
    std::string mismatch;
    {
      std::lock_guard lock(mutex_);
      for (int q = 0; q < world_size() && mismatch.empty(); ++q) {
        const CollectiveDesc& other = recent_[static_cast<size_t>(q)][desc.sequence % kRecent];
        if (q == rank || other.sequence != desc.sequence || same_collective(other, desc)) continue;
        mismatch = mismatch_message(q, other, rank, desc);
      }
      if (mismatch.empty()) {
        recent_[static_cast<size_t>(rank)][desc.sequence % kRecent] = desc;
        launched_[static_cast<size_t>(rank)] = desc.sequence;
        return;
      }
    }
    fail(ErrorCode::kFailedPrecondition, mismatch);
    throw_failure(rank);
  }

  // "replica 1 (its last collective: ...)" for each rank that has not launched `sequence`.
  std::string missing_ranks(uint64_t sequence) const {
    std::lock_guard lock(mutex_);
    std::string names;
    for (int r = 0; r < world_size(); ++r) {
      uint64_t last = launched_[static_cast<size_t>(r)];
      if (last >= sequence) continue;
      names += fmt::format("{}replica {} (its last collective: {})", names.empty() ? "" : ", ", r,
                           last == 0 ? std::string("none") : describe(recent_[static_cast<size_t>(r)][last % kRecent]));
    }
    return names;
  }

  bool failed() const { return failed_.load(std::memory_order_acquire); }

  // Keeps the first cause, then aborts NCCL: kernels spinning for a rank that will not come exit.
  void fail(ErrorCode code, const std::string& message) noexcept {
    {
      std::lock_guard lock(mutex_);
      if (failed_.load(std::memory_order_relaxed)) return;
      failure_code_ = code;
      try {
        failure_ = message;
      } catch (...) {
        failure_.clear();  // out of memory for the text: the group still stops
      }
      failed_.store(true, std::memory_order_release);
    }
    collectives_->abort();
  }

  [[noreturn]] void throw_failure(int rank) const {
    std::lock_guard lock(mutex_);
    throw Error(failure_code_, fmt::format("replica {} stopped: {}", rank, failure_));
  }

 private:
  // Another rank may be up to a ring of launches ahead (it cannot complete more without us).
  static constexpr size_t kRecent = 2 * 64;

  std::unique_ptr<backend::DeviceCollectives> collectives_;
  const std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> launched_;
  std::vector<std::vector<CollectiveDesc>> recent_;  // per rank, by sequence % kRecent
  std::atomic<bool> failed_{false};
  ErrorCode failure_code_ = ErrorCode::kAborted;
  std::string failure_;
};

}  // namespace detail

namespace {

using detail::CollectiveDesc;
using detail::describe;

double seconds(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

std::string device_list(const std::vector<int>& devices) {
  std::vector<std::string> names;
  for (int d : devices) names.push_back(Device::cuda(d).str());
  return fmt::format("{}", fmt::join(names, ", "));
}

void check_devices(const std::vector<int>& devices) {
  TANDEM_CHECK(!devices.empty(), ErrorCode::kInvalidArgument, "NCCL communicators need at least one device");
  for (size_t i = 0; i < devices.size(); ++i) {
    TANDEM_CHECK(devices[i] >= 0, ErrorCode::kInvalidArgument, "NCCL communicators: device index {} is negative",
                 devices[i]);
    TANDEM_CHECK(std::find(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(i), devices[i]) ==
                     devices.begin() + static_cast<std::ptrdiff_t>(i),
                 ErrorCode::kInvalidArgument,
                 "NCCL communicators over {}: cuda:{} appears twice; NCCL takes one rank per device",
                 device_list(devices), devices[i]);
  }
}

// The loaded CUDA plugin for NCCL over devices (checked, distinct and present); Unavailable with
// the reason when it is not usable.
const backend::CudaPluginStatus& plugin_for(const std::vector<int>& devices) {
  check_devices(devices);
  const backend::CudaPluginStatus& status = backend::load_cuda_plugin();
  TANDEM_CHECK(status.loaded, ErrorCode::kUnavailable,
               "NCCL communicators over {} need the CUDA plugin, which is not usable here: {}; run `trainer doctor` "
               "for the full diagnosis",
               device_list(devices), status.error);
  for (int d : devices) {
    TANDEM_CHECK(d < status.device_count, ErrorCode::kUnavailable,
                 "NCCL communicators over {}: cuda:{} does not exist, {} CUDA device(s) are visible; run `trainer "
                 "doctor` to see them",
                 device_list(devices), d, status.device_count);
  }
  return status;
}

// The plugin's second entry point, tandem_cuda_nccl_create, over devices; every way it can be
// missing is Unavailable with the reason.
std::unique_ptr<backend::DeviceCollectives> create_nccl(const std::vector<int>& devices) {
  const backend::CudaPluginStatus& status = plugin_for(devices);
  const std::string list = device_list(devices);
  std::string why;
  auto create = backend::cuda_plugin_function<TandemNcclCreate>(kTandemNcclEntry, &why);
  TANDEM_CHECK(create != nullptr, ErrorCode::kUnavailable,
               "the CUDA plugin {} has no entry point {} (a plugin older than this engine?): {}; rebuild it",
               status.path, kTandemNcclEntry, why);
  backend::DeviceCollectives* out = nullptr;
  char error[1024] = {};
  int rc = create(kTandemNcclAbi, devices.data(), static_cast<int>(devices.size()), &out, error, sizeof(error));
  TANDEM_CHECK(rc == 0 && out != nullptr, ErrorCode::kUnavailable,
               "creating NCCL communicators over {} failed (code {}): {}; run `trainer doctor` to check the "
               "driver, the GPUs and NCCL",
               list, rc, error);
  return std::unique_ptr<backend::DeviceCollectives>(out);
}

// Several processes: process 0's unique id through the rendezvous, then this process's ranks
// (process rank x local devices onwards) of one communicator over every process's devices.
std::unique_ptr<backend::DeviceCollectives> create_nccl_ranks(const std::vector<int>& devices, ProcessLink& link) {
  const backend::CudaPluginStatus& status = plugin_for(devices);
  const std::string list = device_list(devices);
  std::string why;
  auto unique_id = backend::cuda_plugin_function<TandemNcclUniqueId>(kTandemNcclUniqueIdEntry, &why);
  auto create = backend::cuda_plugin_function<TandemNcclCreateRanks>(kTandemNcclCreateRanksEntry, &why);
  TANDEM_CHECK(unique_id != nullptr && create != nullptr, ErrorCode::kUnavailable,
               "the CUDA plugin {} has no entry points for NCCL across processes (a plugin older than this engine?): "
               "{}; rebuild it",
               status.path, why);
  char error[1024] = {};
  const std::string id = link.rendezvous().share_from_process_zero("nccl-unique-id", "make NCCL's unique id", [&] {
    std::string made(kTandemNcclUniqueIdBytes, '\0');
    int rc = unique_id(kTandemNcclAbi, made.data(), error, sizeof(error));
    TANDEM_CHECK(rc == 0, ErrorCode::kUnavailable, "ncclGetUniqueId on process 0 failed (code {}): {}", rc, error);
    return made;
  });
  TANDEM_CHECK(id.size() == kTandemNcclUniqueIdBytes, ErrorCode::kDataLoss,
               "process 0's NCCL unique id has {} bytes, not {}", id.size(), kTandemNcclUniqueIdBytes);
  const int local = static_cast<int>(devices.size());
  backend::DeviceCollectives* out = nullptr;
  int rc = create(kTandemNcclAbi, id.data(), local * link.size(), local * link.rank(), devices.data(), local, &out,
                  error, sizeof(error));
  TANDEM_CHECK(rc == 0 && out != nullptr, ErrorCode::kUnavailable,
               "creating NCCL ranks {} to {} of {} over {} on process {} failed (code {}): {}; check that every node "
               "reaches the others (NCCL_SOCKET_IFNAME, NCCL_DEBUG=INFO) and run `trainer doctor` on each",
               local * link.rank(), local * link.rank() + local - 1, local * link.size(), list, link.rank(), rc, error);
  return std::unique_ptr<backend::DeviceCollectives>(out);
}

}  // namespace

NcclCommunicator::NcclCommunicator(int rank, std::shared_ptr<detail::NcclGroupState> group,
                                   DeviceServices& services)
    : rank_(rank),
      device_{services.type(), group->collectives().device(rank)},
      group_(std::move(group)),
      stream_(&group_->collectives().stream(rank)),
      after_(services.create_event(device_.index)),
      ring_(kRing) {
  for (Entry& entry : ring_) entry.done = services.create_event(device_.index);
}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return group_->collectives().first_rank() + rank_; }
int NcclCommunicator::world_size() const { return group_->collectives().total_ranks(); }

void NcclCommunicator::check_tensor(const Tensor& x, std::string_view what) const {
  TANDEM_CHECK(x.defined(), ErrorCode::kInvalidArgument, "{} on replica {}: the tensor is undefined", what, rank());
  TANDEM_CHECK(x.device() == device_, ErrorCode::kInvalidArgument,
               "{} on replica {}: its NCCL communicator takes tensors on {}, got {}", what, rank(), device_.str(),
               x.describe());
}

CollectiveHandle NcclCommunicator::all_reduce_async(const Tensor& x, ReduceOp op, CollectiveTag tag) {
  check_tensor(x, "all_reduce");
  TANDEM_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16, ErrorCode::kInvalidArgument,
               "all_reduce reduces f32 or bf16 tensors, got {}", x.describe());
  CollectiveDesc desc{.kind = CollectiveKind::kAllReduce, .op = op, .dtype = x.dtype(), .count = x.numel(),
                      .bucket = tag.bucket};
  return launch(desc, x, Tensor(), tag.after);
}

CollectiveHandle NcclCommunicator::broadcast_async(const Tensor& x, int root, CollectiveTag tag) {
  check_tensor(x, "broadcast");
  TANDEM_CHECK(root >= 0 && root < world_size(), ErrorCode::kInvalidArgument,
               "broadcast: root {} is not a rank of this group of {}", root, world_size());
  CollectiveDesc desc{.kind = CollectiveKind::kBroadcast, .dtype = x.dtype(), .count = x.numel(), .root = root,
                      .bucket = tag.bucket};
  return launch(desc, x, Tensor(), tag.after);
}

CollectiveHandle NcclCommunicator::all_gather_async(const Tensor& x, const Tensor& out, CollectiveTag tag) {
  check_tensor(x, "all_gather");
  check_tensor(out, "all_gather output");
  TANDEM_CHECK(out.dtype() == x.dtype() && out.numel() == x.numel() * world_size(), ErrorCode::kInvalidArgument,
               "all_gather: the output must hold {} x {} elements of {}, got {}", world_size(), x.numel(),
               dtype_name(x.dtype()), out.describe());
  CollectiveDesc desc{.kind = CollectiveKind::kAllGather, .dtype = x.dtype(), .count = x.numel(),
                      .bucket = tag.bucket};
  return launch(desc, x, out, tag.after);
}

CollectiveHandle NcclCommunicator::launch(CollectiveDesc desc, const Tensor& x, const Tensor& out, Stream* after) {
  if (after == nullptr && current_stream() != nullptr && current_stream()->device() == device_) {
    after = current_stream();  // the tensor was written by work queued there
  }
  TANDEM_CHECK(after == nullptr || after->device() == device_, ErrorCode::kInvalidArgument,
               "replica {}: tag.after is a stream on {}, but the collectives run on {}", rank(),
               after == nullptr ? std::string() : after->device().str(), device_.str());
  std::unique_lock lock(mutex_);
  if (group_->failed()) throw_failed();
  if (launched_ - completed_ >= kRing) wait_locked(launched_ + 1 - kRing, lock);
  desc.sequence = launched_ + 1;
  desc.step = step();
  desc.data = x.raw_data();
  desc.out = out.defined() ? out.raw_data() : nullptr;
  group_->arrive(rank_, desc);
  enqueue(desc, x, out, after);
  launched_ = desc.sequence;
  return make_handle(desc.sequence);
}

void NcclCommunicator::enqueue(const CollectiveDesc& desc, const Tensor& x, const Tensor& out, Stream* after) {
  Entry& entry = ring_[desc.sequence % kRing];
  backend::DeviceCollectives& nccl = group_->collectives();
  try {
    if (after != nullptr) {
      // A device-side wait: the collective stream follows the work queued on `after` so far (the
      // gradients it reduces), and the host goes on. Waits use the record current at call time,
      // so one event serves every launch.
      after_->record(*after);
      after_->wait(*stream_);
    }
    switch (desc.kind) {
      case CollectiveKind::kAllReduce:
        nccl.all_reduce(rank_, desc.data, static_cast<size_t>(desc.count), desc.dtype, desc.op == ReduceOp::kAverage);
        break;
      case CollectiveKind::kBroadcast: nccl.broadcast(rank_, desc.data, x.nbytes(), desc.root); break;
      case CollectiveKind::kAllGather: nccl.all_gather(rank_, desc.data, desc.out, x.nbytes()); break;
    }
    entry.done->record(*stream_);
  } catch (const Error& e) {
    group_->fail(e.code(), fmt::format("replica {} could not launch {}: {}", rank(), describe(desc), e.what()));
    throw_failed();
  }
  entry.desc = desc;
  entry.x = x;
  entry.out = out;
  entry.launched_at = std::chrono::steady_clock::now();
}

void NcclCommunicator::stream_wait(uint64_t sequence, Stream& stream) {
  std::unique_lock lock(mutex_);
  TANDEM_CHECK(sequence >= 1 && sequence <= launched_, ErrorCode::kInvalidArgument,
               "replica {}: stream wait for collective #{}, but #{} is the last launched", rank(), sequence, launched_);
  if (poll(sequence)) return;
  // Not complete yet, so its ring entry is not reused: its event is still this collective's.
  ring_[sequence % kRing].done->wait(stream);
}

bool NcclCommunicator::poll(uint64_t sequence) {
  while (completed_ < launched_) {
    Entry& entry = ring_[(completed_ + 1) % kRing];
    bool happened = false;
    try {
      happened = entry.done->query();
    } catch (const Error& e) {
      group_->fail(e.code(), fmt::format("replica {}: {} failed on the device: {}", rank(), describe(entry.desc),
                                         e.what()));
    }
    if (!happened) break;
    // After a failure, NCCL is aborted and its kernels exit without finishing: a completion seen
    // now proves nothing. (fail() sets the flag before aborting, so this check cannot miss it.)
    if (failed_from_ == 0 && group_->failed()) failed_from_ = completed_ + 1;
    entry.x = Tensor();  // the collective no longer needs the buffers
    entry.out = Tensor();
    ++completed_;
  }
  if (failed_from_ != 0 && sequence >= failed_from_) throw_failed();
  if (completed_ >= sequence) return true;
  if (group_->failed()) throw_failed();
  return false;
}

void NcclCommunicator::watchdog() {
  const Entry& oldest = ring_[(completed_ + 1) % kRing];  // the collective every later one waits behind
  std::string async;
  try {
    async = group_->collectives().async_error(rank_);
  } catch (const Error& e) {
    async = e.what();
  }
  if (!async.empty()) {
    group_->fail(ErrorCode::kUnavailable,
                 fmt::format("NCCL failed on replica {} in {}: {}", rank(), describe(oldest.desc), async));
    throw_failed();
  }
  if (std::chrono::steady_clock::now() < oldest.launched_at + group_->timeout()) return;
  std::string missing = group_->missing_ranks(oldest.desc.sequence);
  const bool across = world_size() > group_->world_size();  // other processes' replicas take part
  std::string message =
      missing.empty()
          ? fmt::format("watchdog: {} did not complete within {:.3f} s on replica {} though every replica{} "
                        "launched it: {}the device work it follows (tag.after), a GPU or NCCL is stuck; the timeout "
                        "is CommunicatorOptions::timeout",
                        describe(oldest.desc), seconds(group_->timeout()), rank(), across ? " of this process" : "",
                        across ? "another process's replica, " : "")
          : not_arrived_message(missing, oldest.desc, group_->timeout(), rank_);
  group_->fail(ErrorCode::kDeadlineExceeded, message);
  throw_failed();
}

void NcclCommunicator::wait_locked(uint64_t sequence, std::unique_lock<std::mutex>& lock) {
  TANDEM_CHECK(sequence >= 1 && sequence <= launched_, ErrorCode::kInvalidArgument,
               "replica {}: wait for collective #{}, but #{} is the last launched", rank(), sequence, launched_);
  // Collectives usually finish within microseconds of the last rank's launch: spin briefly, then
  // back off to at most a millisecond so a long wait costs no CPU.
  auto pause = std::chrono::microseconds(10);
  for (int round = 0;; ++round) {
    if (poll(sequence)) return;
    watchdog();
    lock.unlock();
    if (round < 32) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    }
    lock.lock();
  }
}

void NcclCommunicator::wait(uint64_t sequence) {
  std::unique_lock lock(mutex_);
  wait_locked(sequence, lock);
}

bool NcclCommunicator::is_done(uint64_t sequence) {
  std::lock_guard lock(mutex_);
  try {
    if (poll(sequence)) return true;
    watchdog();  // a poller never waits in wait(): it is the watchdog's only chance
    return false;
  } catch (const Error&) {
    return true;  // failed: wait() rethrows the group's first cause
  }
}

void NcclCommunicator::throw_failed() {
  if (failed_from_ == 0) failed_from_ = completed_ + 1;  // nothing incomplete now can be trusted
  group_->throw_failure(rank_);
}

void NcclCommunicator::abort(const std::string& reason) noexcept {
  try {
    group_->fail(ErrorCode::kAborted, fmt::format("replica {} aborted: {}", rank(), reason));
  } catch (...) {
    group_->fail(ErrorCode::kAborted, "a replica aborted");
  }
}

void NcclCommunicator::supervise() noexcept {
  std::lock_guard lock(mutex_);
  if (completed_ >= launched_ || group_->failed()) return;
  try {
    if (!poll(launched_)) watchdog();
  } catch (...) {
    // watchdog() failed the group and NCCL is aborted: this rank's next wait or launch rethrows.
  }
}

void NcclCommunicator::drain() noexcept {
  using namespace std::chrono_literals;
  std::unique_lock lock(mutex_);
  auto settle = [&](std::chrono::milliseconds grace) {
    auto deadline = std::chrono::steady_clock::now() + grace;
    while (completed_ < launched_ && std::chrono::steady_clock::now() < deadline) {
      try {
        if (poll(launched_)) return;
      } catch (const Error&) {
        // failed: keep polling, the events still tell when the device is off the buffers
      }
      lock.unlock();
      std::this_thread::sleep_for(100us);
      lock.lock();
    }
  };
  if (completed_ >= launched_) return;
  // The last collectives are usually just finishing; if not, the others will never come.
  settle(std::min<std::chrono::milliseconds>(group_->timeout(), 2s));
  if (completed_ >= launched_) return;
  try {
    group_->fail(ErrorCode::kAborted, fmt::format("replica {}'s communicator was destroyed with {} collective(s) "
                                                  "pending",
                                                  rank(), launched_ - completed_));
  } catch (...) {
    group_->fail(ErrorCode::kAborted, "a communicator was destroyed with collectives pending");
  }
  settle(2s);  // aborted kernels exit; their buffers are released with the ring
}

NcclCommunicatorGroup::NcclCommunicatorGroup(std::vector<int> devices, CommunicatorOptions options) {
  // The plugin first: its failure says why CUDA is unusable, which the services lookup would not.
  auto collectives = create_nccl(devices);
  init(std::move(collectives), device_services(DeviceType::kCuda), options);
}

NcclCommunicatorGroup::NcclCommunicatorGroup(std::vector<int> devices, CommunicatorOptions options,
                                             ProcessLink& link) {
  auto collectives = create_nccl_ranks(devices, link);
  init(std::move(collectives), device_services(DeviceType::kCuda), options);
}

NcclCommunicatorGroup::NcclCommunicatorGroup(std::unique_ptr<backend::DeviceCollectives> collectives,
                                             DeviceServices& services, CommunicatorOptions options) {
  init(std::move(collectives), services, options);
}

void NcclCommunicatorGroup::init(std::unique_ptr<backend::DeviceCollectives> collectives, DeviceServices& services,
                                 CommunicatorOptions options) {
  TANDEM_CHECK(collectives != nullptr && collectives->world_size() >= 1, ErrorCode::kInvalidArgument,
               "an NCCL communicator group needs collectives over at least one device");
  TANDEM_CHECK(options.timeout.count() > 0, ErrorCode::kInvalidArgument,
               "the collective timeout must be positive, got {} ms", options.timeout.count());
  state_ = std::make_shared<detail::NcclGroupState>(std::move(collectives), options.timeout);
  for (int r = 0; r < state_->world_size(); ++r) {
    ranks_.push_back(std::unique_ptr<NcclCommunicator>(new NcclCommunicator(r, state_, services)));
  }
  auto period = std::clamp<std::chrono::milliseconds>(options.timeout / 10, std::chrono::milliseconds(10),
                                                      std::chrono::milliseconds(1000));
  watchdog_ = std::thread([this, period] { supervise_until_stopped(period); });
}

void NcclCommunicatorGroup::supervise_until_stopped(std::chrono::milliseconds period) {
  std::unique_lock lock(stop_mutex_);
  while (!stop_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    for (auto& rank : ranks_) rank->supervise();
    lock.lock();
  }
}

NcclCommunicatorGroup::~NcclCommunicatorGroup() {
  {
    std::lock_guard lock(stop_mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  // No buffer may be released while a collective could still read or write it.
  for (auto& rank : ranks_) rank->drain();
  ranks_.clear();
}

NcclCommunicator& NcclCommunicatorGroup::communicator(int rank) {
  TANDEM_CHECK(rank >= 0 && rank < world_size(), ErrorCode::kOutOfRange, "rank {} of a group of {}", rank,
               world_size());
  return *ranks_[static_cast<size_t>(rank)];
}

void NcclCommunicatorGroup::abort(const std::string& reason) noexcept {
  try {
    state_->fail(ErrorCode::kAborted, fmt::format("the group was aborted: {}", reason));
  } catch (...) {
    state_->fail(ErrorCode::kAborted, "the group was aborted");
  }
}

}  // namespace tandem::distribute
