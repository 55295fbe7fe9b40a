// Switching between the emulator's lane fibers. On x86-64 a dozen instructions that save the
// callee-saved registers on the old stack and restore them from the new one: swapcontext also
// saves and restores the signal mask, a system call per switch that made it half of the suite's
// time, and under AddressSanitizer its interceptor clears the target stack's shadow at every
// switch (seconds per test). Elsewhere, ucontext.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if !defined(__x86_64__) || defined(TANDEM_EMUL_UCONTEXT)
#include <ucontext.h>
#define TANDEM_EMUL_USE_UCONTEXT 1
#endif

namespace tandem_emul {

#if defined(TANDEM_EMUL_USE_UCONTEXT)

struct FiberContext {
  ucontext_t context;
};

inline void fiber_init(FiberContext& c, void* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.context);
  c.context.uc_stack.ss_sp = stack;
  c.context.uc_stack.ss_size = bytes;
  c.context.uc_link = nullptr;
  makecontext(&c.context, entry, 0);
}

inline void fiber_switch(FiberContext& from, FiberContext& to) { swapcontext(&from.context, &to.context); }

#else

extern "C" void tandem_emul_switch_stack(void** save_sp, void* load_sp);

struct FiberContext {
  void* sp = nullptr;  // where the fiber's registers were saved (its stack pointer while switched out)
};

// A new fiber's stack, top down: a zero return address (entry never returns), entry's address for
// the switch's `ret`, six callee-saved registers, then the x87 control word and MXCSR. After the
// `ret` the stack pointer is 8 modulo 16, as on entry to any function.
inline void fiber_init(FiberContext& c, void* stack, size_t bytes, void (*entry)()) {
  auto top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15};
  auto* slots = reinterpret_cast<uint64_t*>(top - 80);
  std::memset(slots, 0, 80);
  const uint16_t x87_control = 0x037f;  // the ABI's initial values
  const uint32_t mxcsr = 0x1f80;
  std::memcpy(&slots[0], &x87_control, sizeof(x87_control));
  std::memcpy(&slots[1], &mxcsr, sizeof(mxcsr));
  slots[8] = reinterpret_cast<uint64_t>(entry);  // at top - 16
  c.sp = slots;
}

inline void fiber_switch(FiberContext& from, FiberContext& to) { tandem_emul_switch_stack(&from.sp, to.sp); }

#endif

}  // namespace tandem_emul
