// The emulator's execution model (see emulator.h): blocks one at a time; per block one OS thread
// per warp, running its 32 lanes as fibers (fiber_context.h) in turn, each until it reaches a warp
// collective, __syncthreads or its end; warp collectives computed once all lanes have posted;
// __syncthreads a barrier across the warps' threads; per-thread cp.async groups. Fibers, not an OS
// thread per lane: a lane switch costs ~20 ns instead of ~3 us, which makes the suite take
// seconds instead of minutes. What that gives up: the lanes of one warp interleave in a fixed order
// (lane 0 to 31 between two collectives), so a race between lanes of the same warp through shared
// memory (a missing __syncwarp) would not show; races between warps still run truly in parallel.
// The PTX instructions themselves are in emulator_ptx.cpp.
#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/cuda_emul/emulator_internal.h"

#if defined(TANDEM_EMUL_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(TANDEM_EMUL_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

#if !defined(TANDEM_EMUL_USE_UCONTEXT)
// tandem_emul_switch_stack(save_sp, load_sp): saves the callee-saved registers (and the x87 and SSE
// control words) on the current stack and its stack pointer in *save_sp, then restores all of them
// from load_sp's stack and returns on it (fiber_context.h lays out a new fiber's stack alike).
asm(R"(
  .pushsection .text
  .globl tandem_emul_switch_stack
  .type tandem_emul_switch_stack, @function
tandem_emul_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  fnstcw (%rsp)
  stmxcsr 8(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tandem_emul_switch_stack, . - tandem_emul_switch_stack
  .popsection
)");
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace tandem_emul {

namespace {

std::atomic<CopyMode> g_copy_mode{CopyMode::kDeferred};

struct AtomicCounters {
  std::atomic<uint64_t> launches{0}, blocks{0}, mma{0}, ldmatrix{0}, shuffles{0}, copies{0};
};
AtomicCounters g_counters;

struct Range {
  uintptr_t begin, end;
};
std::vector<Range> g_globals;  // written between launches only
std::atomic<bool> g_in_launch{false};

std::mutex g_attr_mutex;
std::map<const void*, int> g_max_dynamic_shared;

// The largest dynamic shared memory a block may have on every GPU that runs our sm_80 paths: sm_86
// and sm_89 parts allow 99 KiB per block (sm_80 163 KiB, sm_90 227 KiB).
constexpr size_t kMaxDynamicShared = 99 * 1024;
// Without cudaFuncSetAttribute a launch may use at most 48 KiB of dynamic shared memory.
constexpr size_t kDefaultDynamicShared = 48 * 1024;

// A block that has not finished in this long is taken to be deadlocked (a __syncthreads that some
// warps never reach). Sanitizer builds run many times slower than this needs.
constexpr auto kBlockTimeout = std::chrono::seconds(600);

// The lane a warp's OS thread is running now (its scheduler sets it before each switch).
thread_local Lane* t_lane = nullptr;
// The kernel body the lanes of this OS thread run.
thread_local const std::function<void()>* t_body = nullptr;

// Each lane's stack. Kernel frames are small (register-sized arrays), but sanitizer builds grow them.
constexpr size_t kStackBytes = 512 * 1024;

// Stacks are mapped once and kept (launches run one at a time), outside the heap: sanitizers then
// neither track nor shadow them as heap blocks.
std::mutex g_stack_mutex;
std::vector<void*> g_free_stacks;

void* take_stack() {
  const std::lock_guard lock(g_stack_mutex);
  if (!g_free_stacks.empty()) {
    void* s = g_free_stacks.back();
    g_free_stacks.pop_back();
    return s;
  }
  void* s = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (s == MAP_FAILED) fatal("mmap of a lane stack failed");
  return s;
}

void give_stack(void* s) {
  const std::lock_guard lock(g_stack_mutex);
  g_free_stacks.push_back(s);
}

}  // namespace

void fatal(const char* what, const char* detail) {
  std::fprintf(stderr, "\n[cuda emulator] FATAL: %s%s%s (block %u,%u,%u thread %u,%u,%u)\n", what,
               detail[0] != '\0' ? ": " : "", detail, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y,
               threadIdx.z);
  std::fflush(stderr);
  std::abort();
}

void set_copy_mode(CopyMode mode) { g_copy_mode = mode; }
CopyMode copy_mode() { return g_copy_mode; }

Counters counters() {
  return {g_counters.launches, g_counters.blocks,   g_counters.mma,
          g_counters.ldmatrix, g_counters.shuffles, g_counters.copies};
}

void reset_counters() {
  g_counters.launches = g_counters.blocks = g_counters.mma = g_counters.ldmatrix = g_counters.shuffles =
      g_counters.copies = 0;
}

void count(Op op) {
  switch (op) {
    case Op::kMma:
      ++g_counters.mma;
      break;
    case Op::kLdmatrix:
      ++g_counters.ldmatrix;
      break;
    case Op::kShuffle:
      ++g_counters.shuffles;
      break;
  }
}

void count_copy() { ++g_counters.copies; }

void register_global(const void* begin, size_t bytes) {
  if (g_in_launch) fatal("register_global during a launch");
  const auto b = reinterpret_cast<uintptr_t>(begin);
  g_globals.push_back({b, b + bytes});
}

void unregister_global(const void* begin) {
  if (g_in_launch) fatal("unregister_global during a launch");
  const auto b = reinterpret_cast<uintptr_t>(begin);
  std::erase_if(g_globals, [b](const Range& r) { return r.begin == b; });
}

void check_global_read(const void* src, size_t bytes) {
  const auto b = reinterpret_cast<uintptr_t>(src);
  for (const Range& r : g_globals) {
    if (b >= r.begin && b + bytes <= r.end) return;
  }
  fatal("cp.async reads global memory outside every registered allocation");
}

void set_max_dynamic_shared(const void* kernel, int bytes) {
  if (bytes < 0 || static_cast<size_t>(bytes) > kMaxDynamicShared) {
    fatal("cudaFuncSetAttribute(MaxDynamicSharedMemorySize) above what sm_86/sm_89 allow (99 KiB)");
  }
  const std::lock_guard lock(g_attr_mutex);
  g_max_dynamic_shared[kernel] = bytes;
}

Lane& lane() { return *t_lane; }

// ---- fibers ---------------------------------------------------------------------------------------
// A switch between a warp's scheduler and one of its lanes, told to the sanitizers, which otherwise
// take the change of stack for a stack overflow (ASan) or lose track of happens-before (TSan).

namespace {

void switch_to_lane(Warp& w, Lane& l) {
  t_lane = &l;
  threadIdx = l.thread;
#if defined(TANDEM_EMUL_ASAN)
  __sanitizer_start_switch_fiber(&w.scheduler_fake_stack, l.stack, kStackBytes);
#endif
#if defined(TANDEM_EMUL_TSAN)
  __tsan_switch_to_fiber(l.tsan_fiber, 0);
#endif
  fiber_switch(w.scheduler, l.context);
#if defined(TANDEM_EMUL_ASAN)
  __sanitizer_finish_switch_fiber(w.scheduler_fake_stack, nullptr, nullptr);
#endif
}

// The lane's side, when it blocks or leaves: on to the next lane of the warp that can run, or back
// to the scheduler after the last one (one switch per lane and round instead of two). A lane is
// resumed (returning here) when it may go on; one that has left the kernel never is.
// Not instrumented by AddressSanitizer: the frames of the last yield of a lane, and its lane_entry,
// are abandoned on its stack when it leaves the kernel, and must leave no poisoned redzones behind
// for the next block's frames there.
__attribute__((no_sanitize("address"))) void yield(Lane& l) {
  Warp& w = *l.warp;
  Lane* next = nullptr;
  for (auto i = static_cast<size_t>(l.lane) + 1; i < w.lane.size() && next == nullptr; ++i) {
    if (w.lane[i].wait == Wait::kRunnable) next = &w.lane[i];
  }
  void** save = l.wait == Wait::kExited ? nullptr : &l.fake_stack;
  if (next != nullptr) {
    t_lane = next;
    threadIdx = next->thread;
#if defined(TANDEM_EMUL_ASAN)
    __sanitizer_start_switch_fiber(save, next->stack, kStackBytes);
#endif
#if defined(TANDEM_EMUL_TSAN)
    __tsan_switch_to_fiber(next->tsan_fiber, 0);
#endif
    fiber_switch(l.context, next->context);
  } else {
#if defined(TANDEM_EMUL_ASAN)
    __sanitizer_start_switch_fiber(save, w.scheduler_stack, w.scheduler_stack_size);
#endif
#if defined(TANDEM_EMUL_TSAN)
    __tsan_switch_to_fiber(w.tsan_scheduler, 0);
#endif
    fiber_switch(l.context, w.scheduler);
  }
  (void)save;
#if defined(TANDEM_EMUL_ASAN)
  __sanitizer_finish_switch_fiber(l.fake_stack, nullptr, nullptr);
#endif
}

void finish_thread(Lane& me) {
  const bool pending = std::any_of(me.groups.begin(), me.groups.end(), [](const auto& g) { return !g.empty(); });
  if (!me.open.empty() || pending) fatal("a thread left the kernel with cp.async copies it never waited for");
}

// A lane's first frame: runs the kernel, then parks for good.
__attribute__((no_sanitize("address"))) void lane_entry() {
  Lane& me = *t_lane;
#if defined(TANDEM_EMUL_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  (*t_body)();
  finish_thread(me);
  me.wait = Wait::kExited;
  yield(me);
  fatal("a lane resumed after leaving the kernel");
}

// Every lane has posted: checks that they all reached the same instruction, then computes.
void complete_collective(Warp& w) {
  const Slot& slot = w.slot;
  for (int l = 1; l < w.lanes; ++l) {
    if (slot.op[l] != slot.op[0] || slot.tag[l] != slot.tag[0]) {
      fatal("the lanes of a warp reached different collective instructions (a diverged .sync.aligned op)");
    }
  }
  count(slot.op[0]);
  compute_collective(w, w.slot);
}

// Runs one block's share of this warp: every lane from the kernel's start to its end.
void run_warp(Warp& w, Block& b) {
  for (Lane& l : w.lane) {
    l.wait = Wait::kRunnable;
    l.open.clear();
    l.groups.clear();
    l.fake_stack = nullptr;
    fiber_init(l.context, l.stack, kStackBytes, lane_entry);
  }
  for (;;) {
    // Lanes pass control on to the next runnable lane themselves (yield): one switch runs them all.
    for (Lane& l : w.lane) {
      if (l.wait == Wait::kRunnable) {
        switch_to_lane(w, l);
        break;
      }
    }
    int collective = 0, exited = 0;  // the other lanes wait at __syncthreads
    for (const Lane& l : w.lane) {
      if (l.wait == Wait::kRunnable) fatal("emulator: a runnable lane was skipped");
      collective += l.wait == Wait::kCollective ? 1 : 0;
      exited += l.wait == Wait::kExited ? 1 : 0;
    }
    if (exited == w.lanes) break;
    if (collective > 0) {
      if (collective != w.lanes) {
        fatal(exited > 0 ? "a warp collective with some lanes exited (undefined on a GPU)"
                         : "a warp collective that some lanes wait at __syncthreads instead (a diverged warp)");
      }
      complete_collective(w);
      for (Lane& l : w.lane) l.wait = Wait::kRunnable;
    } else {
      b.sync->arrive_and_wait();  // every lane still in the kernel is at __syncthreads
      for (Lane& l : w.lane) {
        if (l.wait == Wait::kSync) l.wait = Wait::kRunnable;
      }
    }
  }
  b.sync->arrive_and_drop();  // threads that have left no longer count at __syncthreads
}

}  // namespace

const uint32_t* collective(Op op, const void* tag, const uint32_t* in, int n_in) {
  Lane& me = *t_lane;
  Warp& w = *me.warp;
  // One slot per warp suffices: the next collective's results are computed only once every lane
  // has posted to it, that is after every lane has read its result of this one.
  w.slot.op[me.lane] = op;
  w.slot.tag[me.lane] = tag;
  std::copy(in, in + n_in, w.slot.in[me.lane]);
  me.wait = Wait::kCollective;
  yield(me);
  return w.slot.out[me.lane];
}

// ---- shared memory and barriers -----------------------------------------------------------------

void* dynamic_shared(size_t align) {
  const Block& b = *t_lane->warp->block;
  if (b.shared_bytes == 0) fatal("extern __shared__ used by a kernel launched with 0 bytes of shared memory");
  if (reinterpret_cast<uintptr_t>(b.shared) % align != 0) fatal("dynamic shared memory misaligned");
  return b.shared;
}

size_t cvta_generic_to_shared(const void* pointer) {
  const Block& b = *t_lane->warp->block;
  const auto p = reinterpret_cast<uintptr_t>(pointer), base = reinterpret_cast<uintptr_t>(b.shared);
  if (p < base || p >= base + b.shared_bytes) {
    fatal("__cvta_generic_to_shared of an address outside the block's dynamic shared memory");
  }
  return p - base;
}

std::byte* shared_at(const Block& b, uint64_t address, size_t bytes) {
  if (address + bytes > b.shared_bytes) fatal("a shared-memory access past the block's dynamic shared memory");
  return b.shared + address;
}

void syncthreads() {
  Lane& me = *t_lane;
  me.wait = Wait::kSync;
  yield(me);
}

// ---- launches -------------------------------------------------------------------------------------

namespace {

// Hands blocks from the launching thread to the warp threads and waits for each to finish.
class Gate {
 public:
  void start(uint64_t generation, int warps) {
    const std::lock_guard lock(mutex_);
    generation_ = generation;
    running_ = warps;
    cv_.notify_all();
  }
  void stop() {
    const std::lock_guard lock(mutex_);
    stop_ = true;
    cv_.notify_all();
  }
  // Warp threads: the next block's generation, or 0 when the launch is over.
  uint64_t next(uint64_t seen) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    return stop_ ? 0 : generation_;
  }
  void finished() {
    const std::lock_guard lock(mutex_);
    if (--running_ == 0) done_.notify_all();
  }
  bool wait_done() {
    std::unique_lock lock(mutex_);
    return done_.wait_for(lock, kBlockTimeout, [&] { return running_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_, done_;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
};

void check_config(const LaunchConfig& c, const void* kernel) {
  const uint64_t threads = uint64_t{c.block.x} * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024) fatal("a launch with 0 or more than 1024 threads per block");
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0) fatal("a launch with an empty grid");
  if (c.grid.y > 65535 || c.grid.z > 65535) fatal("a grid's y or z dimension above 65535");
  if (c.shared_bytes > kDefaultDynamicShared) {
    const std::lock_guard lock(g_attr_mutex);
    const auto it = g_max_dynamic_shared.find(kernel);
    if (it == g_max_dynamic_shared.end() || static_cast<size_t>(it->second) < c.shared_bytes) {
      fatal("a launch with more than 48 KiB of dynamic shared memory and no cudaFuncSetAttribute allowing it");
    }
  }
}

}  // namespace

void run_grid(const LaunchConfig& config, const void* kernel, const std::function<void()>& body) {
  check_config(config, kernel);
  if (g_in_launch.exchange(true)) fatal("nested or concurrent launches are not emulated");
  ++g_counters.launches;
  const int threads = static_cast<int>(config.block.x * config.block.y * config.block.z);
  const int warps = (threads + kWarpLanes - 1) / kWarpLanes;
  // 128-byte alignment, as the GPU's shared window; at least 16 bytes so that the pointer exists.
  const size_t bytes = config.shared_bytes;
  const size_t allocated = (std::max<size_t>(bytes, 16) + 127) / 128 * 128;
  const std::unique_ptr<std::byte, decltype(&std::free)> storage(
      static_cast<std::byte*>(std::aligned_alloc(128, allocated)), &std::free);

  Block block;
  block.shared = storage.get();
  block.shared_bytes = bytes;
  std::vector<Warp> warp(static_cast<size_t>(warps));
  for (int w = 0; w < warps; ++w) {
    Warp& wp = warp[static_cast<size_t>(w)];
    wp.block = &block;
    wp.lanes = std::min(kWarpLanes, threads - w * kWarpLanes);
    wp.lane.resize(static_cast<size_t>(wp.lanes));
    for (int l = 0; l < wp.lanes; ++l) {
      Lane& ln = wp.lane[static_cast<size_t>(l)];
      const auto t = static_cast<unsigned>(w * kWarpLanes + l);
      ln.warp = &wp;
      ln.lane = l;
      ln.thread = {t % config.block.x, (t / config.block.x) % config.block.y, t / (config.block.x * config.block.y)};
      ln.stack = take_stack();
    }
  }
  Gate gate;
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(warps));
  for (int w = 0; w < warps; ++w) {
    workers.emplace_back([&, w] {
      Warp& wp = warp[static_cast<size_t>(w)];
      blockDim = config.block;
      gridDim = config.grid;
      t_body = &body;
#if defined(TANDEM_EMUL_ASAN)
      // The stack this thread's scheduler runs on, for the lanes' switches back to it.
      pthread_attr_t attr;
      void* stack = nullptr;
      if (pthread_getattr_np(pthread_self(), &attr) != 0 ||
          pthread_attr_getstack(&attr, &stack, &wp.scheduler_stack_size) != 0) {
        fatal("pthread_getattr_np failed");
      }
      pthread_attr_destroy(&attr);
      wp.scheduler_stack = stack;
#endif
#if defined(TANDEM_EMUL_TSAN)
      wp.tsan_scheduler = __tsan_get_current_fiber();
      for (Lane& l : wp.lane) l.tsan_fiber = __tsan_create_fiber(0);
#endif
      uint64_t generation = 0;
      while ((generation = gate.next(generation)) != 0) {
        blockIdx = block.index;
        run_warp(wp, block);
        gate.finished();
      }
#if defined(TANDEM_EMUL_TSAN)
      for (Lane& l : wp.lane) __tsan_destroy_fiber(l.tsan_fiber);
#endif
    });
  }
  uint64_t generation = 0;
  for (unsigned z = 0; z < config.grid.z; ++z) {
    for (unsigned y = 0; y < config.grid.y; ++y) {
      for (unsigned x = 0; x < config.grid.x; ++x) {
        // Shared memory starts as NaN bytes, as it starts undefined on a GPU: a read of a tile
        // element nothing wrote shows up in the results.
        std::memset(block.shared, 0xff, bytes);
        block.index = {x, y, z};
        block.sync.emplace(warps);
        ++g_counters.blocks;
        gate.start(++generation, warps);
        if (!gate.wait_done()) {
          std::fprintf(stderr, "[cuda emulator] block (%u,%u,%u) did not finish\n", x, y, z);
          fatal("deadlock: warps wait at a __syncthreads that others never reach");
        }
      }
    }
  }
  gate.stop();
  for (std::thread& w : workers) w.join();
  for (Warp& wp : warp) {
    for (Lane& l : wp.lane) give_stack(l.stack);
  }
  g_in_launch = false;
}

}  // namespace tandem_emul
