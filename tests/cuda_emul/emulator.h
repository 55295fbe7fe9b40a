// A CPU emulator for CUDA kernels, so that the plugin's real kernel sources (compiled as host C++
// against the shadow headers in shadow/, after transform_cuda.py's mechanical rewrite) can be
// tested on a machine without a GPU. A launch runs its blocks one after another; in a block, each
// warp is a real OS thread (so warps race as on a GPU) whose 32 lanes are fibers with their own
// stacks. __syncthreads is a barrier across the warps; warp-collective instructions (mma.sync,
// ldmatrix, shuffles) post each lane's operands, and once all 32 lanes have, every lane's result is
// computed from all of them, per the PTX ISA's fragment layouts. Inline PTX is
// interpreted from the kernel's own asm text and operand bindings (ptx_asm), so a wrong operand
// order in the source shows up as a wrong result rather than being papered over.
// cp.async copies are applied either when issued or, in the deferred mode, only at the
// cp.async.wait_group that must complete them, their destination poisoned (NaN) meanwhile: a read
// before the wait, or a load into a buffer that another warp still reads, then gives a wrong result.
// Emulator-detected faults (a diverged warp collective, a misaligned or out-of-range address, a
// deadlock) print what happened and abort, as a faulting kernel would end the process's context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// CUDA's built-in vector types and index variables. Each emulated thread has its own copy of the
// index variables, as each GPU thread has its own special registers.
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace tandem_emul {

[[noreturn]] void fatal(const char* what, const char* detail = "");

enum class CopyMode {
  kEager,     // a cp.async lands when issued
  kDeferred,  // it lands at the wait that must complete it; its destination reads as NaN until then
};
void set_copy_mode(CopyMode mode);
CopyMode copy_mode();

// What the emulator did since the last reset, for the tests to show that the paths really ran.
struct Counters {
  uint64_t launches = 0, blocks = 0, mma = 0, ldmatrix = 0, shuffles = 0, copies = 0;
};
Counters counters();
void reset_counters();

// Global-memory ranges the kernels may read with cp.async: every copy's source must lie inside one
// (as an access outside any allocation faults on a GPU). Register only between launches.
void register_global(const void* begin, size_t bytes);
void unregister_global(const void* begin);

// The dynamic shared memory of the calling thread's block (the transform's replacement for an
// `extern __shared__` array), aligned to at least `align` bytes.
void* dynamic_shared(size_t align);

// A kernel's attribute: the most dynamic shared memory it may be launched with.
void set_max_dynamic_shared(const void* kernel, int bytes);

struct LaunchConfig {
  dim3 grid, block;
  size_t shared_bytes;
  LaunchConfig(dim3 g, dim3 b, size_t bytes = 0, cudaStream_t = nullptr) : grid(g), block(b), shared_bytes(bytes) {}
};

// Runs `body` (the kernel called with its arguments) once per thread of every block of the grid.
void run_grid(const LaunchConfig& config, const void* kernel, const std::function<void()>& body);

template <typename Kernel>
const void* kernel_id(Kernel* kernel) {
  return reinterpret_cast<const void*>(kernel);
}

// kernel<<<grid, block, bytes, stream>>>(args...): the arguments are converted to the kernel's
// parameter types once, as a launch copies them into the kernel's parameter space.
template <typename... Params, typename... Args>
void launch(const LaunchConfig& config, void (*kernel)(Params...), Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "a kernel launch needs every argument");
  const std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
  run_grid(config, kernel_id(kernel), [&] { std::apply(kernel, params); });
}

// Device intrinsics.
void syncthreads();
size_t cvta_generic_to_shared(const void* pointer);
// A value exchange among the lanes of a warp: lane l gets the value of lane source(l).
enum class ShuffleKind { kXor, kDown, kUp, kIndex };
uint64_t shuffle(ShuffleKind kind, unsigned mask, uint64_t bits, int operand, int width);

// One operand of an inline asm statement: an output or read-write register (a reference) or an
// input value, with its constraint letter(s) as written in the source.
struct AsmOperand {
  const char* constraint;
  void* ref;       // outputs: where the register lives
  uint64_t value;  // inputs
  size_t size;
};
template <typename T>
AsmOperand asm_out(const char* constraint, T& ref) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8));
  return {constraint, &ref, 0, sizeof(T)};
}
template <typename T>
AsmOperand asm_in(const char* constraint, const T& value) {
  uint64_t bits = 0;
  if constexpr (std::is_pointer_v<T>) {
    bits = reinterpret_cast<uintptr_t>(value);
  } else {
    static_assert(std::is_integral_v<T> || std::is_floating_point_v<T>);
    if constexpr (std::is_integral_v<T>) {
      bits = static_cast<uint64_t>(value);
    } else {
      std::memcpy(&bits, &value, sizeof(T));
    }
  }
  return {constraint, nullptr, bits, sizeof(T)};
}
// asm volatile(text : outputs : inputs): interprets the PTX instruction in `text`, its %n operands
// numbered over the outputs, then the inputs, as in GCC's extended asm.
void ptx_asm(const char* text, std::initializer_list<AsmOperand> outputs, std::initializer_list<AsmOperand> inputs);

}  // namespace tandem_emul
