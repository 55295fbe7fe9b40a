#include "engine/core/allocator.h"

#include <bit>
#include <deque>
#include <memory>

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

void* CachingAllocator::allocate(size_t bytes) {
  size_t block = size_class(bytes);
  std::lock_guard lock(mutex_);
  ++stats_.allocations;
  auto it = free_blocks_.find(block);
  void* ptr = nullptr;
  if (it != free_blocks_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.bytes_cached -= static_cast<int64_t>(block);
  } else {
    try {
      ptr = services_.raw_allocate(device_.index, block);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kResourceExhausted) throw;
      // Give the cache back and try once more before reporting the shortage.
      for (auto& [size, blocks] : free_blocks_) {
        for (void* p : blocks) services_.raw_free(device_.index, p, size);
        stats_.system_frees += static_cast<int64_t>(blocks.size());
        blocks.clear();
      }
      stats_.bytes_cached = 0;
      ptr = services_.raw_allocate(device_.index, block);
    }
    ++stats_.system_allocations;
  }
  stats_.bytes_in_use += static_cast<int64_t>(block);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  size_t block = size_class(bytes);
  std::lock_guard lock(mutex_);
  try {
    free_blocks_[block].push_back(ptr);
    stats_.bytes_cached += static_cast<int64_t>(block);
  } catch (...) {
    services_.raw_free(device_.index, ptr, block);  // could not keep it: give it back
    ++stats_.system_frees;
  }
  stats_.bytes_in_use -= static_cast<int64_t>(block);
}

void CachingAllocator::empty_cache() noexcept {
  std::lock_guard lock(mutex_);
  for (auto& [size, blocks] : free_blocks_) {
    for (void* p : blocks) services_.raw_free(device_.index, p, size);
    stats_.system_frees += static_cast<int64_t>(blocks.size());
  }
  free_blocks_.clear();
  stats_.bytes_cached = 0;
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
