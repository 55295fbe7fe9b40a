// The simulated collectives (see nccl_communicator_sim_util.h).
#include "tests/distribute/nccl_communicator_sim_util.h"

#include <cstring>

#include "engine/core/error.h"

namespace tandem::testing {

void SimStream::progress() {
  if (owner_ != nullptr) owner_->progress();
}

void SimEvent::record(Stream& stream) {
  stream_ = dynamic_cast<SimStream*>(&stream);
  target_ = stream_ == nullptr ? 0 : stream_->queued();
}

void SimEvent::wait(Stream& stream) {
  auto* waiter = dynamic_cast<SimStream*>(&stream);
  if (waiter == nullptr || stream_ == nullptr) return;
  waiter->wait_for_ = stream_;
  waiter->wait_until_ = target_;
}

bool SimEvent::query() {
  if (stream_ == nullptr) return true;
  stream_->progress();
  return stream_->finished() >= target_;
}

SimCollectives::SimCollectives(int world_size)
    : pending_(static_cast<size_t>(world_size)),
      launches_(static_cast<size_t>(world_size), 0),
      async_errors_(static_cast<size_t>(world_size)) {
  for (int r = 0; r < world_size; ++r) streams_.push_back(std::make_unique<SimStream>(this));
}

void SimCollectives::all_reduce(int rank, void* data, size_t count, DType dtype, bool average) {
  queue(rank, Part{Kind::kAllReduce, data, nullptr, count * dtype_size(dtype), average, 0, nullptr, 0, dtype});
}

void SimCollectives::broadcast(int rank, void* data, size_t bytes, int root) {
  queue(rank, Part{Kind::kBroadcast, data, nullptr, bytes, false, root, nullptr, 0});
}

void SimCollectives::all_gather(int rank, const void* in, void* out, size_t bytes_per_rank) {
  queue(rank, Part{Kind::kAllGather, const_cast<void*>(in), out, bytes_per_rank, false, 0, nullptr, 0});
}

void SimCollectives::queue(int rank, Part part) {
  TANDEM_CHECK(!aborted_.load(), ErrorCode::kAborted, "simulated collectives were aborted");
  SimStream& stream = *streams_[static_cast<size_t>(rank)];
  {
    std::lock_guard lock(mutex_);
    part.wait_for = stream.wait_for_;
    part.wait_until = stream.wait_until_;
    stream.wait_for_ = nullptr;
    pending_[static_cast<size_t>(rank)].push_back(part);
    ++launches_[static_cast<size_t>(rank)];
    stream.queued_.fetch_add(1);
  }
  progress();
}

void SimCollectives::progress() {
  std::lock_guard lock(mutex_);
  if (aborted_) {
    // Aborted kernels exit at once, without moving data, whether or not the others came.
    for (size_t r = 0; r < pending_.size(); ++r) {
      streams_[r]->finished_.fetch_add(pending_[r].size());
      pending_[r].clear();
    }
    return;
  }
  for (;;) {
    if (hold_) return;
    std::vector<Part> parts;
    for (auto& parts_of_rank : pending_) {
      if (parts_of_rank.empty()) return;
      const Part& front = parts_of_rank.front();
      if (front.wait_for != nullptr && front.wait_for->finished() < front.wait_until) return;
      parts.push_back(front);
    }
    run(parts);
    for (size_t r = 0; r < pending_.size(); ++r) {
      pending_[r].pop_front();
      streams_[r]->finished_.fetch_add(1);
    }
  }
}

void SimCollectives::run(const std::vector<Part>& parts) {
  const Part& p0 = parts[0];
  if (p0.kind == Kind::kAllReduce && p0.dtype == DType::kBF16) {
    reduce_bf16(parts);
  } else if (p0.kind == Kind::kAllReduce) {
    const size_t n = p0.bytes / sizeof(float);
    std::vector<float> acc(static_cast<float*>(p0.data), static_cast<float*>(p0.data) + n);
    for (size_t q = 1; q < parts.size(); ++q) {
      for (size_t i = 0; i < n; ++i) acc[i] += static_cast<float*>(parts[q].data)[i];
    }
    if (p0.average) {
      for (float& v : acc) v /= static_cast<float>(parts.size());
    }
    for (const Part& p : parts) std::memcpy(p.data, acc.data(), p0.bytes);
  } else if (p0.kind == Kind::kBroadcast) {
    for (const Part& p : parts) {
      if (p.data != parts[static_cast<size_t>(p0.root)].data) {
        std::memcpy(p.data, parts[static_cast<size_t>(p0.root)].data, p0.bytes);
      }
    }
  } else {
    for (const Part& p : parts) {
      for (size_t q = 0; q < parts.size(); ++q) {
        std::memcpy(static_cast<char*>(p.out) + q * p0.bytes, parts[q].data, p0.bytes);
      }
    }
  }
}

void SimCollectives::reduce_bf16(const std::vector<Part>& parts) {
  const Part& p0 = parts[0];
  const size_t n = p0.bytes / sizeof(BFloat16);
  auto at = [](const Part& p, size_t i) { return bf16_to_float(static_cast<const BFloat16*>(p.data)[i]); };
  std::vector<BFloat16> acc(n);
  for (size_t i = 0; i < n; ++i) {
    float sum = at(p0, i);
    for (size_t q = 1; q < parts.size(); ++q) sum = bf16_to_float(float_to_bf16(sum + at(parts[q], i)));
    if (p0.average) sum /= static_cast<float>(parts.size());
    acc[i] = float_to_bf16(sum);
  }
  for (const Part& p : parts) std::memcpy(p.data, acc.data(), p0.bytes);
}

std::string SimCollectives::async_error(int rank) {
  std::lock_guard lock(mutex_);
  return async_errors_[static_cast<size_t>(rank)];
}

void SimCollectives::abort() noexcept {
  aborted_.store(true);
  progress();  // what was pending exits at once, as aborted NCCL kernels do
}

void SimCollectives::hold(bool on) {
  {
    std::lock_guard lock(mutex_);
    hold_ = on;
  }
  progress();
}

void SimCollectives::set_async_error(int rank, std::string text) {
  std::lock_guard lock(mutex_);
  async_errors_[static_cast<size_t>(rank)] = std::move(text);
}

int SimCollectives::launches(int rank) const {
  std::lock_guard lock(mutex_);
  return launches_[static_cast<size_t>(rank)];
}

}  // namespace tandem::testing
