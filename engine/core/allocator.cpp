#include "engine/core/allocator.h"

#include <algorithm>
#include <bit>
#include <deque>

#include "engine/core/error.h"

namespace tandem {

CachingAllocator::CachingAllocator(DeviceServices& services, Device device)
    : services_(services), device_(device) {}

CachingAllocator::~CachingAllocator() { empty_cache(); }

size_t CachingAllocator::size_class(size_t bytes) {
  constexpr size_t kMinBlock = 256;
  if (bytes <= kMinBlock) return kMinBlock;
  // Four classes between consecutive powers of two: 2^k * {1, 1.25, 1.5, 1.75}.
  size_t top = std::bit_floor(bytes);
  size_t step = top / 4;
  return (bytes + step - 1) / step * step;
}

Stream* CachingAllocator::allocation_stream() const {
  if (device_.is_cpu()) return nullptr;
  Stream* s = current_stream();
  return s != nullptr && s->device() == device_ ? s : nullptr;
}

void* CachingAllocator::take_cached(const PoolKey& key) {
  auto it = free_blocks_.find(key);
  if (it == free_blocks_.end() || it->second.empty()) return nullptr;
  void* ptr = it->second.back();
  it->second.pop_back();
  stats_.bytes_cached -= static_cast<int64_t>(key.second);
  return ptr;
}

void* CachingAllocator::allocate_system(size_t block) {
  try {
    return services_.raw_allocate(device_.index, block);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kResourceExhausted) throw;
  }
  // Give the cache back and try once more before reporting the shortage.
  if (!device_.is_cpu()) services_.synchronize(device_.index);
  collect_pending();
  release_cached();
  try {
    return services_.raw_allocate(device_.index, block);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kResourceExhausted) throw;
    stats_.oom_bytes_asked = static_cast<int64_t>(block);
    stats_.oom_bytes_in_use = stats_.bytes_in_use;
    throw Error(ErrorCode::kResourceExhausted,
                fmt::format("{}; out of memory on {} asking for {} bytes while this allocator holds {} bytes in "
                            "use (peak {}); a smaller per-replica batch size would need less",
                            e.what(), device_.str(), block, stats_.bytes_in_use, stats_.peak_bytes_in_use));
  }
}

void* CachingAllocator::allocate(size_t bytes) {
  size_t block = size_class(bytes);
  std::lock_guard lock(mutex_);
  ++stats_.allocations;
  Stream* stream = allocation_stream();
  void* ptr = take_cached({stream, block});
  if (ptr == nullptr && !pending_.empty()) {
    collect_pending();
    ptr = take_cached({stream, block});
  }
  if (ptr == nullptr) {
    ptr = allocate_system(block);
    ++stats_.system_allocations;
  }
  if (!device_.is_cpu()) in_use_[ptr] = InUse{block, stream, {}};
  stats_.bytes_in_use += static_cast<int64_t>(block);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void CachingAllocator::record_stream(void* ptr, Stream& stream) {
  if (device_.is_cpu() || ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = in_use_.find(ptr);
  TANDEM_CHECK(it != in_use_.end(), ErrorCode::kInvalidArgument,
               "record_stream: {} was not allocated by the {} allocator", ptr, device_.str());
  InUse& u = it->second;
  if (&stream == u.stream || std::find(u.used_on.begin(), u.used_on.end(), &stream) != u.used_on.end()) return;
  u.used_on.push_back(&stream);
}

void CachingAllocator::retire_stream(Stream& stream) noexcept {
  std::lock_guard lock(mutex_);
  try {
    for (auto it = free_blocks_.begin(); it != free_blocks_.end();) {
      if (it->first.first != &stream) {
        ++it;
        continue;
      }
      auto& target = free_blocks_[{nullptr, it->first.second}];
      target.insert(target.end(), it->second.begin(), it->second.end());
      it = free_blocks_.erase(it);
    }
    for (auto& [ptr, u] : in_use_) {
      if (u.stream == &stream) u.stream = nullptr;
      std::erase(u.used_on, &stream);
    }
    for (auto& p : pending_) {
      if (p.stream == &stream) p.stream = nullptr;
    }
  } catch (...) {
    // Only the vector growth above can throw; the blocks stay where they were, still valid.
  }
}

std::unique_ptr<Event> CachingAllocator::take_event() {
  if (spare_events_.empty()) return services_.create_event(device_.index);
  auto e = std::move(spare_events_.back());
  spare_events_.pop_back();
  return e;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  size_t block = size_class(bytes);
  std::lock_guard lock(mutex_);
  stats_.bytes_in_use -= static_cast<int64_t>(block);
  stats_.bytes_cached += static_cast<int64_t>(block);
  try {
    Stream* stream = nullptr;
    if (!device_.is_cpu()) {
      auto it = in_use_.find(ptr);
      if (it != in_use_.end()) {
        InUse u = std::move(it->second);
        in_use_.erase(it);
        stream = u.stream;
        if (!u.used_on.empty()) {
          Pending p{ptr, block, stream, {}};
          for (Stream* s : u.used_on) {
            p.events.push_back(take_event());
            p.events.back()->record(*s);
          }
          pending_.push_back(std::move(p));
          ++stats_.blocks_pending;
          return;
        }
      }
    }
    free_blocks_[{stream, block}].push_back(ptr);
  } catch (...) {
    // Could not keep it (or record its events): wait for the device, then give it back.
    if (!device_.is_cpu()) {
      try {
        services_.synchronize(device_.index);
      } catch (...) {
      }
    }
    services_.raw_free(device_.index, ptr, block);
    ++stats_.system_frees;
    stats_.bytes_cached -= static_cast<int64_t>(block);
  }
}

void CachingAllocator::collect_pending() {
  auto done = [](Pending& p) {
    return std::all_of(p.events.begin(), p.events.end(), [](auto& e) { return e->query(); });
  };
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!done(*it)) {
      ++it;
      continue;
    }
    free_blocks_[{it->stream, it->block}].push_back(it->ptr);
    for (auto& e : it->events) spare_events_.push_back(std::move(e));
    --stats_.blocks_pending;
    it = pending_.erase(it);
  }
}

void CachingAllocator::release_cached() {
  for (auto& [key, blocks] : free_blocks_) {
    for (void* p : blocks) services_.raw_free(device_.index, p, key.second);
    stats_.system_frees += static_cast<int64_t>(blocks.size());
    stats_.bytes_cached -= static_cast<int64_t>(key.second * blocks.size());
  }
  free_blocks_.clear();
}

void CachingAllocator::empty_cache() noexcept {
  std::lock_guard lock(mutex_);
  try {
    if (!device_.is_cpu()) {
      services_.synchronize(device_.index);
      collect_pending();
    }
  } catch (...) {
    // The device failed; free what is known to be free.
  }
  release_cached();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

CachingAllocator& allocator_for(Device device) {
  static std::mutex mutex;
  // Deque: allocators never move, and are never destroyed before tensors that outlive main's locals.
  static auto* allocators = new std::deque<CachingAllocator>();
  std::lock_guard lock(mutex);
  for (auto& a : *allocators) {
    if (a.device() == device) return a;
  }
  DeviceServices& services = device_services(device.type);
  TANDEM_CHECK(device.index >= 0 && device.index < services.device_count(), ErrorCode::kInvalidArgument,
               "device {} does not exist: {} {} device(s) visible", device.str(), services.device_count(),
               device_type_name(device.type));
  return allocators->emplace_back(services, device);
}

}  // namespace tandem
