// CpuCommunicator: launches queue a collective for this rank's worker thread, which meets the
// other ranks at the rendezvous and moves the data. All-reduce is reduce-scatter (rank r sums
// chunk r of every rank's buffer, rank 0 first) then all-gather (each rank copies the others' chunks).
// bf16 buffers (distribute.allreduce_dtype: bf16) take the same phases at half the bytes: each fold
// sums in f32, in rank order, and rounds to bf16 once when it stores.
#include "engine/distribute/cpu_communicator.h"

#include "engine/distribute/bf16_wire.h"
#include "engine/distribute/cpu_rendezvous.h"
#include "engine/distribute/process_link.h"

#include <algorithm>
#include <chrono>
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

// dst[i] = round(((src[0][i] + src[1][i]) + ...) [/ R]) for i in [lo, hi), the sums in f32.
void fold_bf16(const std::vector<const uint16_t*>& src, uint16_t* dst, int64_t lo, int64_t hi, ReduceOp op) {
  const float divisor = static_cast<float>(src.size());
  float acc[kBlock];
  for (int64_t begin = lo; begin < hi; begin += kBlock) {
    const int64_t len = std::min(kBlock, hi - begin);
    for (int64_t j = 0; j < len; ++j) acc[j] = bf16_wire::widen(src[0][begin + j]);
    for (size_t q = 1; q < src.size(); ++q) {
      for (int64_t j = 0; j < len; ++j) acc[j] += bf16_wire::widen(src[q][begin + j]);
    }
    if (op == ReduceOp::kAverage) {
      for (int64_t j = 0; j < len; ++j) acc[j] /= divisor;
    }
    for (int64_t j = 0; j < len; ++j) dst[begin + j] = bf16_wire::round(acc[j]);
  }
}

void check_cpu_tensor(const Tensor& x, std::string_view what) {
  TANDEM_CHECK(x.defined(), ErrorCode::kInvalidArgument, "{}: the tensor is undefined", what);
  TANDEM_CHECK(x.device().is_cpu(), ErrorCode::kInvalidArgument,
               "{}: the CPU communicator takes CPU tensors, got {}", what, x.describe());
}

}  // namespace

CpuCommunicator::CpuCommunicator(int rank, std::shared_ptr<detail::Rendezvous> rendezvous, ProcessLink* link,
                                 bool ordered)
    : rank_(rank), rendezvous_(std::move(rendezvous)), link_(link), ordered_(ordered), queue_(kQueueCapacity) {
  sources_.resize(static_cast<size_t>(rendezvous_->world_size()));
  sources16_.resize(sources_.size());
  if (link_ != nullptr) base_rank_ = link_->rank() * rendezvous_->world_size();
  worker_ = std::thread([this] { worker_loop(); });
}

int CpuCommunicator::world_size() const {
  return rendezvous_->world_size() * (link_ != nullptr ? link_->size() : 1);
}

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
  TANDEM_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16, ErrorCode::kInvalidArgument,
               "all_reduce reduces f32 or bf16 tensors, got {}", x.describe());
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
  const int ranks = rendezvous_->world_size();
  const int64_t n = desc.count;
  auto chunk_begin = [&](int r) { return n * r / ranks; };
  // Reduce-scatter: only rank r writes chunk r, and only into its own buffer.
  if (desc.dtype == DType::kBF16) {
    reduce_scatter_bf16(desc, chunk_begin(rank_), chunk_begin(rank_ + 1));
  } else {
    reduce_scatter_f32(desc, chunk_begin(rank_), chunk_begin(rank_ + 1));
  }
  rendezvous_->sync(rank_);
  // All-gather: chunk q of rank q is final; nobody writes it any more.
  const size_t element = dtype_size(desc.dtype);
  auto* mine = static_cast<unsigned char*>(desc.data);
  for (int q = 0; q < ranks; ++q) {
    if (q == rank_) continue;
    const auto lo = static_cast<size_t>(chunk_begin(q)), hi = static_cast<size_t>(chunk_begin(q + 1));
    const auto* theirs = static_cast<const unsigned char*>(rendezvous_->desc(q).data);
    std::memcpy(mine + lo * element, theirs + lo * element, (hi - lo) * element);
  }
}

void CpuCommunicator::reduce_scatter_f32(const CollectiveDesc& desc, int64_t lo, int64_t hi) {
  for (int q = 0; q < rendezvous_->world_size(); ++q) {
    sources_[static_cast<size_t>(q)] = static_cast<const float*>(rendezvous_->desc(q).data);
  }
  if (link_ == nullptr) return reduce_chunk(sources_, static_cast<float*>(desc.data), lo, hi, desc.op);
  reduce_chunk_across(desc, lo, hi);
}

void CpuCommunicator::run_broadcast(const CollectiveDesc& desc) {
  if (link_ != nullptr) return broadcast_across(desc);
  if (rank_ == desc.root) return;
  size_t bytes = static_cast<size_t>(desc.count) * dtype_size(desc.dtype);
  std::memcpy(desc.data, rendezvous_->desc(desc.root).data, bytes);
}

void CpuCommunicator::run_all_gather(const CollectiveDesc& desc) {
  if (link_ != nullptr) return all_gather_across(desc);
  size_t bytes = static_cast<size_t>(desc.count) * dtype_size(desc.dtype);
  auto* out = static_cast<unsigned char*>(desc.out);
  for (int q = 0; q < world_size(); ++q) {
    std::memcpy(out + static_cast<size_t>(q) * bytes, rendezvous_->desc(q).data, bytes);
  }
}

template <typename F>
void CpuCommunicator::across(const CollectiveDesc& desc, F&& f) {
  const auto start = std::chrono::steady_clock::now();
  try {
    f();
    across_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
                             .count(),
                         std::memory_order_relaxed);
  } catch (const Error& e) {
    // It reaches one local rank first: stop the others, which may wait for it at the rendezvous.
    const std::string message = fmt::format("replica {}, {}: {}", rank(), detail::describe(desc), e.what());
    rendezvous_->fail(e.code(), message);
    throw Error(e.code(), message);
  }
}

void CpuCommunicator::reduce_chunk_across(const CollectiveDesc& desc, int64_t lo, int64_t hi) {
  const int local = rendezvous_->world_size();
  const auto len = static_cast<size_t>(hi - lo);
  float* mine = static_cast<float*>(desc.data) + lo;
  const auto world = static_cast<float>(world_size());
  if (!ordered_) {
    // Sum inside the process, then a ring all-reduce over processes (Gloo's order), then scale.
    reduce_chunk(sources_, static_cast<float*>(desc.data), lo, hi, ReduceOp::kSum);
    across(desc, [&] { link_->all_reduce_sum(rank_, mine, hi - lo); });
    if (desc.op == ReduceOp::kAverage) {
      for (size_t i = 0; i < len; ++i) mine[i] /= world;
    }
    return;
  }
  // Every rank's chunk from every process, then one fold in global rank order: the same sums, bit
  // for bit, as one process with all the ranks.
  const size_t piece = len * sizeof(float) * static_cast<size_t>(local);
  staging_.resize(piece * static_cast<size_t>(link_->size() + 1));
  auto* in = reinterpret_cast<float*>(staging_.data());
  for (int q = 0; q < local; ++q) std::memcpy(in + static_cast<size_t>(q) * len, sources_[static_cast<size_t>(q)] + lo, len * sizeof(float));
  auto* all = reinterpret_cast<float*>(staging_.data() + piece);
  across(desc, [&] { link_->all_gather(rank_, in, all, piece); });
  gathered_.resize(static_cast<size_t>(world_size()));
  for (size_t r = 0; r < gathered_.size(); ++r) gathered_[r] = all + r * len;
  reduce_chunk(gathered_, mine, 0, hi - lo, desc.op);
}

void CpuCommunicator::reduce_scatter_bf16(const detail::CollectiveDesc& desc, int64_t lo, int64_t hi) {
  for (int q = 0; q < rendezvous_->world_size(); ++q) {
    sources16_[static_cast<size_t>(q)] = static_cast<const uint16_t*>(rendezvous_->desc(q).data);
  }
  if (link_ == nullptr) return fold_bf16(sources16_, static_cast<uint16_t*>(desc.data), lo, hi, desc.op);
  reduce_chunk_across_bf16(desc, lo, hi);
}

void CpuCommunicator::reduce_chunk_across_bf16(const detail::CollectiveDesc& desc, int64_t lo, int64_t hi) {
  const int local = rendezvous_->world_size();
  const auto len = static_cast<size_t>(hi - lo);
  uint16_t* mine = static_cast<uint16_t*>(desc.data) + lo;
  if (!ordered_) {
    // Sum inside the process, then Gloo's ring over processes (each hop's sum rounded), then scale.
    fold_bf16(sources16_, static_cast<uint16_t*>(desc.data), lo, hi, ReduceOp::kSum);
    across(desc, [&] { link_->all_reduce_sum_bf16(rank_, mine, hi - lo); });
    if (desc.op == ReduceOp::kAverage) {
      const auto world = static_cast<float>(world_size());
      for (size_t i = 0; i < len; ++i) mine[i] = bf16_wire::round(bf16_wire::widen(mine[i]) / world);
    }
    return;
  }
  // Every rank's chunk from every process, then one fold in global rank order.
  const size_t piece = len * sizeof(uint16_t) * static_cast<size_t>(local);
  staging_.resize(piece * static_cast<size_t>(link_->size() + 1));
  auto* in = reinterpret_cast<uint16_t*>(staging_.data());
  for (int q = 0; q < local; ++q) {
    std::memcpy(in + static_cast<size_t>(q) * len, sources16_[static_cast<size_t>(q)] + lo, len * sizeof(uint16_t));
  }
  auto* all = reinterpret_cast<uint16_t*>(staging_.data() + piece);
  across(desc, [&] { link_->all_gather(rank_, in, all, piece); });
  gathered16_.resize(static_cast<size_t>(world_size()));
  for (size_t r = 0; r < gathered16_.size(); ++r) gathered16_[r] = all + r * len;
  fold_bf16(gathered16_, mine, 0, hi - lo, desc.op);
}

void CpuCommunicator::broadcast_across(const CollectiveDesc& desc) {
  const int local = rendezvous_->world_size();
  const int root_process = desc.root / local, root_local = desc.root % local;
  const size_t bytes = static_cast<size_t>(desc.count) * dtype_size(desc.dtype);
  // Local rank 0 of every process takes part across processes; the root's own buffer is never written.
  if (rank_ == 0) {
    if (link_->rank() == root_process && root_local != 0) std::memcpy(desc.data, rendezvous_->desc(root_local).data, bytes);
    across(desc, [&] { link_->broadcast(0, desc.data, bytes, root_process); });
  }
  rendezvous_->sync(rank_);
  const bool is_root = link_->rank() == root_process && rank_ == root_local;
  if (rank_ != 0 && !is_root) std::memcpy(desc.data, rendezvous_->desc(0).data, bytes);
}

void CpuCommunicator::all_gather_across(const CollectiveDesc& desc) {
  const int local = rendezvous_->world_size();
  const size_t bytes = static_cast<size_t>(desc.count) * dtype_size(desc.dtype);
  if (rank_ == 0) {
    staging_.resize(bytes * static_cast<size_t>(local));
    for (int q = 0; q < local; ++q) std::memcpy(staging_.data() + static_cast<size_t>(q) * bytes, rendezvous_->desc(q).data, bytes);
    across(desc, [&] { link_->all_gather(0, staging_.data(), desc.out, bytes * static_cast<size_t>(local)); });
  }
  rendezvous_->sync(rank_);
  if (rank_ != 0) std::memcpy(desc.out, rendezvous_->desc(0).out, bytes * static_cast<size_t>(world_size()));
}

CpuCommunicatorGroup::CpuCommunicatorGroup(int world_size, CommunicatorOptions options) {
  init(world_size, options, nullptr, false);
}

CpuCommunicatorGroup::CpuCommunicatorGroup(int local_ranks, CommunicatorOptions options, ProcessLink& link,
                                           bool ordered) {
  // The rendezvous admitted only processes of as many ranks: chunks and global ranks line up.
  TANDEM_CHECK(link.local_replicas() == local_ranks, ErrorCode::kInvalidArgument,
               "a group of {} local ranks on a process link of {} channels", local_ranks, link.local_replicas());
  init(local_ranks, options, &link, ordered);
}

void CpuCommunicatorGroup::init(int local_ranks, CommunicatorOptions options, ProcessLink* link, bool ordered) {
  TANDEM_CHECK(local_ranks >= 1, ErrorCode::kInvalidArgument, "a communicator group needs at least 1 rank, got {}",
               local_ranks);
  TANDEM_CHECK(options.timeout.count() > 0, ErrorCode::kInvalidArgument,
               "the collective timeout must be positive, got {} ms", options.timeout.count());
  rendezvous_ = std::make_shared<detail::Rendezvous>(local_ranks, options.timeout);
  for (int r = 0; r < local_ranks; ++r) {
    ranks_.push_back(std::unique_ptr<CpuCommunicator>(new CpuCommunicator(r, rendezvous_, link, ordered)));
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
