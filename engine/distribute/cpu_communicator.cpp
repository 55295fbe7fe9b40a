// CpuCommunicator: launches queue a collective for this rank's worker thread, which meets the
// other ranks at the rendezvous and moves the data. All-reduce is reduce-scatter (rank r sums
// chunk r of every rank's buffer, rank 0 first) then all-gather (each rank copies the others' chunks).
#include "engine/distribute/cpu_communicator.h"

#include "engine/distribute/cpu_rendezvous.h"

#include <algorithm>
#include <cstring>

namespace tandem::distribute {
namespace {

using detail::CollectiveDesc;

// Floats summed per pass through a stack buffer: small enough for L1, long enough to vectorise.
constexpr int64_t kBlock = 2048;

// dst[i] = (((src[0][i] + src[1][i]) + src[2][i]) + ...) [/ R] for i in [lo, hi): the same order on
// every rank, so every rank holds bitwise equal results. dst may be one of the sources.
void reduce_chunk(const std::vector<const float*>& src, float* dst, int64_t lo, int64_t hi, ReduceOp op) {
  const size_t ranks = src.size();
  const float divisor = static_cast<float>(ranks);
  float acc[kBlock];
  for (int64_t begin = lo; begin < hi; begin += kBlock) {
    const int64_t len = std::min(kBlock, hi - begin);
    const float* s0 = src[0] + begin;
    if (ranks == 1) {
      std::memcpy(acc, s0, static_cast<size_t>(len) * sizeof(float));
    } else {
      const float* s1 = src[1] + begin;
      for (int64_t j = 0; j < len; ++j) acc[j] = s0[j] + s1[j];
    }
    for (size_t q = 2; q < ranks; ++q) {
      const float* s = src[q] + begin;
      for (int64_t j = 0; j < len; ++j) acc[j] += s[j];
    }
    if (op == ReduceOp::kAverage) {
      for (int64_t j = 0; j < len; ++j) acc[j] /= divisor;
    }
    std::memcpy(dst + begin, acc, static_cast<size_t>(len) * sizeof(float));
  }
}

void check_cpu_tensor(const Tensor& x, std::string_view what) {
  TANDEM_CHECK(x.defined(), ErrorCode::kInvalidArgument, "{}: the tensor is undefined", what);
  TANDEM_CHECK(x.device().is_cpu(), ErrorCode::kInvalidArgument,
               "{}: the CPU communicator takes CPU tensors, got {}", what, x.describe());
}

}  // namespace

CpuCommunicator::CpuCommunicator(int rank, std::shared_ptr<detail::Rendezvous> rendezvous)
    : rank_(rank), rendezvous_(std::move(rendezvous)), queue_(kQueueCapacity) {
  sources_.resize(static_cast<size_t>(rendezvous_->world_size()));
  worker_ = std::thread([this] { worker_loop(); });
}

int CpuCommunicator::world_size() const { return rendezvous_->world_size(); }

CpuCommunicator::~CpuCommunicator() {
  bool pending = false;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    pending = completed_ < launched_;
  }
  // Pending work waits on ranks that may never come: stop the group rather than hang here.
  if (pending) rendezvous_->fail(ErrorCode::kAborted, fmt::format("replica {}'s communicator was destroyed with collectives pending", rank_));
  changed_.notify_all();
  worker_.join();
}

CollectiveHandle CpuCommunicator::all_reduce_async(const Tensor& x, ReduceOp op, CollectiveTag tag) {
  check_cpu_tensor(x, "all_reduce");
  TANDEM_CHECK(x.dtype() == DType::kF32, ErrorCode::kInvalidArgument,
               "all_reduce reduces f32 tensors, got {}", x.describe());
  CollectiveDesc desc{.kind = CollectiveKind::kAllReduce, .op = op, .dtype = x.dtype(), .count = x.numel(),
                      .bucket = tag.bucket};
  return enqueue(desc, x, Tensor());
}

CollectiveHandle CpuCommunicator::broadcast_async(const Tensor& x, int root, CollectiveTag tag) {
  check_cpu_tensor(x, "broadcast");
  TANDEM_CHECK(root >= 0 && root < world_size(), ErrorCode::kInvalidArgument,
               "broadcast: root {} is not a rank of this group of {}", root, world_size());
  CollectiveDesc desc{.kind = CollectiveKind::kBroadcast, .dtype = x.dtype(), .count = x.numel(), .root = root,
                      .bucket = tag.bucket};
  return enqueue(desc, x, Tensor());
}

CollectiveHandle CpuCommunicator::all_gather_async(const Tensor& x, const Tensor& out, CollectiveTag tag) {
  check_cpu_tensor(x, "all_gather");
  check_cpu_tensor(out, "all_gather output");
  TANDEM_CHECK(out.dtype() == x.dtype() && out.numel() == x.numel() * world_size(), ErrorCode::kInvalidArgument,
               "all_gather: the output must hold {} x {} elements of {}, got {}", world_size(), x.numel(),
               dtype_name(x.dtype()), out.describe());
  CollectiveDesc desc{.kind = CollectiveKind::kAllGather, .dtype = x.dtype(), .count = x.numel(),
                      .bucket = tag.bucket};
  return enqueue(desc, x, out);
}

CollectiveHandle CpuCommunicator::enqueue(CollectiveDesc desc, const Tensor& x, const Tensor& out) {
  std::unique_lock lock(mutex_);
  // A full ring waits for the worker: back-pressure instead of growth.
  changed_.wait(lock, [&] { return launched_ - completed_ < kQueueCapacity; });
  desc.sequence = ++launched_;
  desc.step = step();
  desc.data = x.raw_data();
  desc.out = out.defined() ? out.raw_data() : nullptr;
  Work& work = queue_[desc.sequence % kQueueCapacity];
  work.desc = desc;
  work.x = x;
  work.out = out;
  lock.unlock();
  changed_.notify_all();
  return make_handle(desc.sequence);
}

void CpuCommunicator::worker_loop() {
  for (;;) {
    Work work;
    bool skip = false;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || completed_ < launched_; });
      if (completed_ == launched_) return;  // stopping, nothing left
      work = std::move(queue_[(completed_ + 1) % kQueueCapacity]);
      skip = failed_from_ != 0;  // after a failure the group is stopped: later work fails too
    }
    std::exception_ptr error;
    if (!skip) {
      try {
        run(work.desc);
      } catch (...) {
        error = std::current_exception();
      }
    }
    const uint64_t sequence = completed_ + 1;  // the worker runs them in order
    work = Work();  // drop the buffers before the launcher may reuse them
    {
      std::lock_guard lock(mutex_);
      if (error && failed_from_ == 0) {
        failed_from_ = sequence;
        error_ = error;
      }
      ++completed_;
    }
    changed_.notify_all();
  }
}

void CpuCommunicator::wait(uint64_t sequence) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return completed_ >= sequence; });
  if (failed_from_ != 0 && sequence >= failed_from_) std::rethrow_exception(error_);
}

bool CpuCommunicator::is_done(uint64_t sequence) {
  std::lock_guard lock(mutex_);
  return completed_ >= sequence;
}

void CpuCommunicator::abort(const std::string& reason) noexcept {
  rendezvous_->fail(ErrorCode::kAborted, fmt::format("replica {} aborted: {}", rank_, reason));
}

void CpuCommunicator::run(const CollectiveDesc& desc) {
  rendezvous_->arrive(rank_, desc);
  switch (desc.kind) {
    case CollectiveKind::kAllReduce: run_all_reduce(desc); break;
    case CollectiveKind::kBroadcast: run_broadcast(desc); break;
    case CollectiveKind::kAllGather: run_all_gather(desc); break;
  }
  // No rank leaves (and reuses its buffer) while another may still read it.
  rendezvous_->sync(rank_);
}

void CpuCommunicator::run_all_reduce(const CollectiveDesc& desc) {
  const int ranks = world_size();
  const int64_t n = desc.count;
  auto chunk_begin = [&](int r) { return n * r / ranks; };
  for (int q = 0; q < ranks; ++q) sources_[static_cast<size_t>(q)] = static_cast<const float*>(rendezvous_->desc(q).data);
  float* mine = static_cast<float*>(desc.data);
  // Reduce-scatter: only rank r writes chunk r, and only into its own buffer.
  reduce_chunk(sources_, mine, chunk_begin(rank_), chunk_begin(rank_ + 1), desc.op);
  rendezvous_->sync(rank_);
  // All-gather: chunk q of rank q is final; nobody writes it any more.
  for (int q = 0; q < ranks; ++q) {
    if (q == rank_) continue;
    int64_t lo = chunk_begin(q), hi = chunk_begin(q + 1);
    std::memcpy(mine + lo, sources_[static_cast<size_t>(q)] + lo, static_cast<size_t>(hi - lo) * sizeof(float));
  }
}

void CpuCommunicator::run_broadcast(const CollectiveDesc& desc) {
  if (rank_ == desc.root) return;
  size_t bytes = static_cast<size_t>(desc.count) * dtype_size(desc.dtype);
  std::memcpy(desc.data, rendezvous_->desc(desc.root).data, bytes);
}

void CpuCommunicator::run_all_gather(const CollectiveDesc& desc) {
  size_t bytes = static_cast<size_t>(desc.count) * dtype_size(desc.dtype);
  auto* out = static_cast<unsigned char*>(desc.out);
  for (int q = 0; q < world_size(); ++q) {
    std::memcpy(out + static_cast<size_t>(q) * bytes, rendezvous_->desc(q).data, bytes);
  }
}

CpuCommunicatorGroup::CpuCommunicatorGroup(int world_size, CommunicatorOptions options) {
  TANDEM_CHECK(world_size >= 1, ErrorCode::kInvalidArgument, "a communicator group needs at least 1 rank, got {}",
               world_size);
  TANDEM_CHECK(options.timeout.count() > 0, ErrorCode::kInvalidArgument,
               "the collective timeout must be positive, got {} ms", options.timeout.count());
  rendezvous_ = std::make_shared<detail::Rendezvous>(world_size, options.timeout);
  for (int r = 0; r < world_size; ++r) {
    ranks_.push_back(std::unique_ptr<CpuCommunicator>(new CpuCommunicator(r, rendezvous_)));
  }
}

CpuCommunicatorGroup::~CpuCommunicatorGroup() = default;

CpuCommunicator& CpuCommunicatorGroup::communicator(int rank) {
  TANDEM_CHECK(rank >= 0 && rank < world_size(), ErrorCode::kOutOfRange, "rank {} of a group of {}", rank,
               world_size());
  return *ranks_[static_cast<size_t>(rank)];
}

void CpuCommunicatorGroup::abort(const std::string& reason) noexcept {
  rendezvous_->fail(ErrorCode::kAborted, fmt::format("the group was aborted: {}", reason));
}

}  // namespace tandem::distribute
