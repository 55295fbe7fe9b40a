#include "engine/core/context.h"

#include <sched.h>

#include <thread>

#include "engine/core/error.h"

namespace tandem {

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::kF32: return "fp32";
    case Precision::kTf32: return "tf32";
    case Precision::kBf16: return "bf16";
  }
  return "?";
}

Precision parse_precision(std::string_view text) {
  if (text == "fp32") return Precision::kF32;
  if (text == "tf32") return Precision::kTf32;
  if (text == "bf16") return Precision::kBf16;
  throw_error(ErrorCode::kInvalidArgument, "precision '{}' is not one of fp32, tf32, bf16", text);
}

ExecutionContext::ExecutionContext(Device device, int num_threads, uint64_t seed, KernelOptions options)
    : device_(device),
      stream_(device_services(device.type).create_stream(device.index)),
      num_threads_(num_threads > 0 ? num_threads : available_cores()),
      generator_(seed),
      allocator_(&allocator_for(device)),
      options_(options) {}

ExecutionContext::~ExecutionContext() {
  // Work still queued may use memory that is about to be returned to the cache for other streams.
  if (!device_.is_cpu()) {
    try {
      stream_->synchronize();
    } catch (const Error&) {
      // The device failed already; the error was reported where it happened.
    }
  }
  extension_.reset();
  allocator_->retire_stream(*stream_);
  if (current_stream() == stream_.get()) set_current_stream(nullptr);
}

void ExecutionContext::bind() {
  device_services(device_.type).bind_thread(device_.index);
  set_current_stream(bound_stream());
}

ContextBinding::ContextBinding(ExecutionContext& ctx) : scope_(ctx.bound_stream()) {
  device_services(ctx.device().type).bind_thread(ctx.device().index);
}

}  // namespace tandem
