// A caching allocator per device: freed blocks are kept in size classes and handed out
// again, so a training step makes no system allocation once the first step has run
// (a first touch of a fresh page costs about 11 us on our machines; a cudaMalloc far more).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "engine/core/device.h"

namespace tandem {

struct AllocatorStats {
  int64_t system_allocations = 0;  // calls to the device's raw_allocate
  int64_t system_frees = 0;
  int64_t allocations = 0;         // calls to allocate, cached or not
  int64_t bytes_in_use = 0;        // in blocks handed out, after rounding to the size class
  int64_t bytes_cached = 0;        // in free blocks kept for reuse
  int64_t peak_bytes_in_use = 0;
};

class CachingAllocator {
 public:
  CachingAllocator(DeviceServices& services, Device device);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes);
  void deallocate(void* ptr, size_t bytes) noexcept;
  // Returns every cached block to the system (after an out-of-memory, or at shutdown).
  void empty_cache() noexcept;
  AllocatorStats stats() const;
  Device device() const { return device_; }

  // Blocks are rounded up to one of four size classes per power of two (at most 25% waste).
  static size_t size_class(size_t bytes);

 private:
  DeviceServices& services_;
  Device device_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_blocks_;  // by size class
  AllocatorStats stats_;
};

// The allocator of a device, created on first use and living until the process ends.
CachingAllocator& allocator_for(Device device);

}  // namespace tandem
