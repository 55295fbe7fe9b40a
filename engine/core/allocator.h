// A caching allocator per device: freed blocks are kept in size classes and handed out
// again, so a training step makes no system allocation once the first step has run
// (a first touch of a fresh page costs about 11 us on our machines; a cudaMalloc far more).
//
// On a device with streams, a block belongs to the stream that was current when it was allocated
// (current_stream(), set by ExecutionContext::bind): freed, it goes back to that stream's pool, and
// only an allocation on the same stream takes it again, which stream order makes safe without a
// wait. A block that another stream used too (record_stream, as PyTorch's recordStream) is held
// back after its free until an event recorded on each of those streams has happened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/core/device.h"

namespace tandem {

struct AllocatorStats {
  int64_t system_allocations = 0;  // calls to the device's raw_allocate
  int64_t system_frees = 0;
  int64_t allocations = 0;         // calls to allocate, cached or not
  int64_t bytes_in_use = 0;        // in blocks handed out, after rounding to the size class
  int64_t bytes_cached = 0;        // in free blocks kept for reuse (pending ones included)
  int64_t peak_bytes_in_use = 0;
  int64_t blocks_pending = 0;      // freed, waiting for another stream's event before reuse
  // The last allocation that failed for want of memory (0 when none): what it asked for, and
  // what was in use then. The trainer turns them into a batch size that would fit.
  int64_t oom_bytes_asked = 0;
  int64_t oom_bytes_in_use = 0;
};

class CachingAllocator {
 public:
  CachingAllocator(DeviceServices& services, Device device);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes);
  void deallocate(void* ptr, size_t bytes) noexcept;
  // The block at ptr (allocated here) is used by work queued on `stream` as well: its reuse after
  // deallocate waits for that work. A no-op for the block's own stream and on the CPU.
  void record_stream(void* ptr, Stream& stream);
  // The stream is going away (its work has finished): its cached blocks, and the blocks still handed
  // out that would return to it, join the pool of allocations made with no current stream.
  void retire_stream(Stream& stream) noexcept;
  // Returns every cached block to the system (after an out-of-memory, or at shutdown); on a device,
  // after waiting for the device, since a cached block may still be read by queued work.
  void empty_cache() noexcept;
  AllocatorStats stats() const;
  Device device() const { return device_; }

  // Blocks are rounded up to one of four size classes per power of two (at most 25% waste).
  static size_t size_class(size_t bytes);

 private:
  struct InUse {
    size_t block = 0;
    Stream* stream = nullptr;        // the pool it returns to
    std::vector<Stream*> used_on;    // other streams that used it
  };
  struct Pending {
    void* ptr;
    size_t block;
    Stream* stream;
    std::vector<std::unique_ptr<Event>> events;
  };
  using PoolKey = std::pair<Stream*, size_t>;

  Stream* allocation_stream() const;
  void* take_cached(const PoolKey& key);
  void* allocate_system(size_t block);
  void collect_pending();  // moves blocks whose events have happened back to their pools
  void release_cached();   // frees every free block; the caller holds the lock
  std::unique_ptr<Event> take_event();

  DeviceServices& services_;
  Device device_;
  mutable std::mutex mutex_;
  std::map<PoolKey, std::vector<void*>> free_blocks_;
  std::unordered_map<void*, InUse> in_use_;  // devices with streams only
  std::vector<Pending> pending_;
  std::vector<std::unique_ptr<Event>> spare_events_;
  AllocatorStats stats_;
};

// The allocator of a device, created on first use and living until the process ends.
CachingAllocator& allocator_for(Device device);

}  // namespace tandem
