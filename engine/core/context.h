// The execution context of one replica: its device, its stream, how many CPU threads its
// kernels may use, its random generator, how its kernels should run (precision, determinism)
// and the backend's per-context state (on CUDA: library handles, workspace, algorithm caches).
// Every kernel call takes one.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "engine/core/allocator.h"
#include "engine/core/device.h"
#include "engine/core/random.h"

namespace tandem {

// Arithmetic of convolutions and matmuls: plain f32, TF32 tensor cores (10-bit mantissa inputs,
// f32 accumulation), or bf16 autocast (bf16 inputs, f32 accumulation and master weights).
enum class Precision : uint8_t { kF32, kTf32, kBf16 };

std::string_view precision_name(Precision precision);  // "fp32", "tf32", "bf16"
Precision parse_precision(std::string_view text);      // throws InvalidArgument naming the choices

struct KernelOptions {
  bool deterministic = false;    // only algorithms that give bitwise-repeatable results
  bool cudnn_benchmark = false;  // time the candidate algorithms once per shape instead of asking heuristics
  Precision precision = Precision::kF32;
};

// State a backend keeps per context (created by the backend on first use, destroyed with the
// context, before its stream).
class ContextExtension {
 public:
  virtual ~ContextExtension() = default;
};

class ExecutionContext {
 public:
  // num_threads: the CPU thread budget of this replica's kernels (0 means all cores).
  explicit ExecutionContext(Device device = Device::cpu(), int num_threads = 0, uint64_t seed = 0,
                            KernelOptions options = {});
  ~ExecutionContext();
  ExecutionContext(const ExecutionContext&) = delete;
  ExecutionContext& operator=(const ExecutionContext&) = delete;

  Device device() const { return device_; }
  Stream& stream() { return *stream_; }
  int num_threads() const { return num_threads_; }
  Generator& generator() { return generator_; }
  CachingAllocator& allocator() { return *allocator_; }
  const KernelOptions& options() const { return options_; }
  KernelOptions& options() { return options_; }

  ContextExtension* extension() { return extension_.get(); }
  void set_extension(std::unique_ptr<ContextExtension> extension) { extension_ = std::move(extension); }

  // Binds the calling thread to this context: its current device, and its current stream (so copies
  // made without a stream are ordered on this context's stream). A replica thread calls it once.
  void bind();
  // The stream bind() makes current: this context's on a device, none on the CPU.
  Stream* bound_stream() { return device_.is_cpu() ? nullptr : stream_.get(); }

 private:
  Device device_;
  std::unique_ptr<Stream> stream_;
  int num_threads_;
  Generator generator_;
  CachingAllocator* allocator_;
  KernelOptions options_;
  std::unique_ptr<ContextExtension> extension_;  // declared after stream_: destroyed first
};

// Binds the calling thread to a context for a scope and restores the previous stream after.
class ContextBinding {
 public:
  explicit ContextBinding(ExecutionContext& ctx);

 private:
  StreamScope scope_;
};

// The number of cores this process may run on (its CPU affinity), at least 1.
int available_cores();

}  // namespace tandem
