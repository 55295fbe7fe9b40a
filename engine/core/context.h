// The execution context of one replica: its device, its stream, how many CPU threads its
// kernels may use, and its random generator. Every kernel call takes one.
#pragma once

#include <memory>

#include "engine/core/allocator.h"
#include "engine/core/device.h"
#include "engine/core/random.h"

namespace tandem {

class ExecutionContext {
 public:
  // num_threads: the CPU thread budget of this replica's kernels (0 means all cores).
  explicit ExecutionContext(Device device = Device::cpu(), int num_threads = 0, uint64_t seed = 0);

  Device device() const { return device_; }
  Stream& stream() { return *stream_; }
  int num_threads() const { return num_threads_; }
  Generator& generator() { return generator_; }
  CachingAllocator& allocator() { return *allocator_; }

 private:
  Device device_;
  std::unique_ptr<Stream> stream_;
  int num_threads_;
  Generator generator_;
  CachingAllocator* allocator_;
};

// The number of cores this process may run on (its CPU affinity), at least 1.
int available_cores();

}  // namespace tandem
