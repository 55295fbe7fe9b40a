#include "engine/core/context.h"

#include <sched.h>

#include <thread>

namespace tandem {

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ExecutionContext::ExecutionContext(Device device, int num_threads, uint64_t seed)
    : device_(device),
      stream_(device_services(device.type).create_stream(device.index)),
      num_threads_(num_threads > 0 ? num_threads : available_cores()),
      generator_(seed),
      allocator_(&allocator_for(device)) {}

}  // namespace tandem
