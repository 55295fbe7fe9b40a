// The emulator's own state, shared by emulator.cpp (blocks, warps, lanes, barriers) and
// emulator_ptx.cpp (the PTX instructions and shuffles); not for kernels or tests.
#pragma once

#include <barrier>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "tests/cuda_emul/emulator.h"
#include "tests/cuda_emul/fiber_context.h"

// Which sanitizer instruments this build (GCC defines __SANITIZE_*__; clang answers __has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_EMUL_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define TANDEM_EMUL_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(TANDEM_EMUL_ASAN)
#define TANDEM_EMUL_ASAN 1
#endif
#if __has_feature(thread_sanitizer) && !defined(TANDEM_EMUL_TSAN)
#define TANDEM_EMUL_TSAN 1
#endif
#endif

namespace tandem_emul {

constexpr int kWarpLanes = 32;
// The most 32-bit words a lane posts to, or receives from, one collective (mma: 4 A, 2 B, 4 C).
constexpr int kMaxIn = 10;
constexpr int kMaxOut = 4;

enum class Op : uint8_t { kMma, kLdmatrix, kShuffle };

struct Block;
struct Warp;

// One collective's operands and results for every lane of a warp.
struct Slot {
  Op op[kWarpLanes];
  const void* tag[kWarpLanes];  // the instruction (its PTX text, or the shuffle kind): lanes must agree
  uint32_t in[kWarpLanes][kMaxIn];
  uint32_t out[kWarpLanes][kMaxOut];
};

struct PendingCopy {
  uint64_t dst;  // shared address
  const void* src;
  uint32_t bytes, src_bytes;
};

// Where a lane stopped: it runs until it reaches a warp collective or __syncthreads, or leaves.
enum class Wait : uint8_t { kRunnable, kCollective, kSync, kExited };

// One emulated thread: a fiber (its own stack and registers) that its warp's OS thread switches to.
struct Lane {
  Warp* warp = nullptr;
  int lane = 0;
  uint3 thread;
  Wait wait = Wait::kRunnable;
  FiberContext context;
  void* stack = nullptr;
  void* fake_stack = nullptr;                   // AddressSanitizer's fiber bookkeeping
  void* tsan_fiber = nullptr;                   // ThreadSanitizer's
  std::vector<PendingCopy> open;                // cp.async issued, not yet committed
  std::deque<std::vector<PendingCopy>> groups;  // committed, oldest first
};

// A warp: one OS thread running its lanes in turn, each until it blocks. When every lane waits at
// the same collective, the warp computes all their results; when every lane still in the kernel
// waits at __syncthreads, the warp waits at the block's barrier with the other warps.
struct Warp {
  Block* block = nullptr;
  int lanes = 0;
  std::vector<Lane> lane;
  Slot slot;
  FiberContext scheduler;
  const void* scheduler_stack = nullptr;  // for AddressSanitizer
  size_t scheduler_stack_size = 0;
  void* scheduler_fake_stack = nullptr;
  void* tsan_scheduler = nullptr;
};

struct Block {
  uint3 index;
  std::byte* shared = nullptr;
  size_t shared_bytes = 0;
  std::optional<std::barrier<>> sync;  // __syncthreads, one arrival per warp
};

Lane& lane();
void count(Op op);
void count_copy();
void check_global_read(const void* src, size_t bytes);
std::byte* shared_at(const Block& b, uint64_t address, size_t bytes);

// Posts this lane's operands, waits for the whole warp, returns this lane's results.
const uint32_t* collective(Op op, const void* tag, const uint32_t* in, int n_in);
// Every lane's results of the slot's collective (emulator_ptx.cpp).
void compute_collective(const Warp& warp, Slot& slot);

}  // namespace tandem_emul
