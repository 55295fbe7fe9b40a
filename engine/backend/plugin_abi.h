// The C entry point between the engine and the dlopen'ed CUDA plugin (libtandem_cuda.so).
// Kept free of CUDA headers: the loader includes it on machines with no CUDA at all. Raise
// kTandemCudaPluginAbi whenever TandemCudaPlugin, DeviceServices or KernelTable change layout.
#pragma once

#include <cstddef>
#include <string>

#include "engine/backend/kernels.h"
#include "engine/core/device.h"

extern "C" {

// 2: DeviceServices gained allocate_host_pinned / free_host_pinned (pinned staging buffers).
// 3: the kernel table is filled; DeviceServices gained fill_zero and bind_thread; ExecutionContext
//    carries KernelOptions and a backend extension.
// 4: the kernel table gained SyncBatchNorm's halves and clip_by_global_norm.
// 5: the kernel table gained add_relu (a residual sum and its ReLU in one pass).
// 7: the kernel table gained batchnorm_add_relu_forward_training (batch norm, residual sum, ReLU).
// 8: the kernel table gained the N-D and transformer ops (permute ... embedding_backward), and
//    cross-entropy takes ignore_index.
// 9: KernelTable::to_bf16. 10: KernelTable::from_bf16.
// 11: the kernel table gained packed attention (packed_attention_supported, _forward, _backward).
// 12: linear_backward_weights_add and softmax_cross_entropy_inplace (the fused classifier).
// 13: sgd_update and adamw_update write bf16 shadows (w16); Storage holds the shadow.
// 14: the factories' arange_fill and random_fill; where from_bf16 is set, bf16 tensors in more
//     entries (conv2d_forward's y, training batch norm's x, linear_forward's y and b, unary's x and
//     y, unary_backward's x, layer_norm_forward's y, packed attention's qkv and y), which a plugin
//     of an older contract would refuse by dtype; UnaryOp gained sigmoid, silu, abs, sin and cos.
// 15: the kernel table gained compare, where, cast, gather, gather_backward and topk_indices
//     (before masked_fill: every later entry moved); CompareOp.
inline constexpr int kTandemCudaPluginAbi = 15;
inline constexpr const char* kTandemCudaPluginEntry = "tandem_cuda_plugin_init";
// Returns the kernel table without initialising CUDA (no driver call): for tests and the doctor.
inline constexpr const char* kTandemCudaKernelTableEntry = "tandem_cuda_kernel_table";

struct TandemCudaPlugin {
  int abi_version = 0;
  // Owned by the plugin, alive until the process ends (the plugin is never unloaded).
  tandem::DeviceServices* services = nullptr;
  const tandem::backend::KernelTable* kernels = nullptr;
  int device_count = 0;
  char runtime_description[128] = {};  // "CUDA runtime 13.0, 2 device(s)"
  char error[512] = {};                // why init failed; no exception crosses this boundary
};

// Returns 0 and fills *out on success; returns nonzero with out->error set on failure
// (an ABI mismatch, no driver, no device).
using TandemCudaPluginInit = int (*)(int abi_version, TandemCudaPlugin* out);

// NCCL collectives across this process's GPUs (issue 6), from a second entry point so the
// table above keeps its layout. engine/distribute wraps them in its Communicator interface.
// 2: DeviceCollectives gained total_ranks / first_rank; the entry points of several processes.
// 3: all_reduce takes the element type (f32, or bf16 for distribute.allreduce_dtype: bf16).
inline constexpr int kTandemNcclAbi = 3;
inline constexpr const char* kTandemNcclEntry = "tandem_cuda_nccl_create";
// Several processes: process 0 makes the unique id (ncclGetUniqueId), the launcher's rendezvous
// carries it to the others, and every process creates its ranks of the one communicator.
inline constexpr const char* kTandemNcclUniqueIdEntry = "tandem_cuda_nccl_unique_id";
inline constexpr const char* kTandemNcclCreateRanksEntry = "tandem_cuda_nccl_create_ranks";
inline constexpr size_t kTandemNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

}  // extern "C"

namespace tandem::backend {

// One NCCL communicator per device, created together in this process (ncclCommInitAll), one
// stream per rank. Each replica thread calls with its own rank; calls are enqueued on that
// rank's stream and return at once. Failures throw tandem::Error naming the NCCL call.
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual int world_size() const = 0;  // this process's ranks: the `rank` of every call below
  // Every process's ranks, and this process's first (NCCL's rank of local rank 0): a broadcast's
  // root is one of these global ranks.
  virtual int total_ranks() const { return world_size(); }
  virtual int first_rank() const { return 0; }
  virtual int device(int rank) const = 0;
  virtual Stream& stream(int rank) = 0;  // where this rank's collectives run
  // In place; dtype is kF32 or kBF16 (each sum taken in f32 and rounded once more to bf16 when stored).
  virtual void all_reduce(int rank, void* data, size_t count, DType dtype, bool average) = 0;
  virtual void broadcast(int rank, void* data, size_t bytes, int root) = 0;
  virtual void all_gather(int rank, const void* in, void* out, size_t bytes_per_rank) = 0;
  // Empty while healthy, else NCCL's asynchronous error for the rank, in words.
  virtual std::string async_error(int rank) = 0;
  // ncclCommAbort on every communicator: unblocks kernels waiting for a rank that will not come.
  virtual void abort() noexcept = 0;
};

}  // namespace tandem::backend

extern "C" {
// Creates collectives over devices[0..count); returns 0 with *out set (the caller deletes it), or
// nonzero with error filled (no exception crosses dlsym).
using TandemNcclCreate = int (*)(int abi_version, const int* devices, int count,
                                 tandem::backend::DeviceCollectives** out, char* error, size_t error_size);
// Fills id (kTandemNcclUniqueIdBytes) with a new unique id; 0 on success, else error filled.
using TandemNcclUniqueId = int (*)(int abi_version, char* id, char* error, size_t error_size);
// This process's ranks first_rank .. first_rank + count - 1 of total_ranks, over devices, from the
// unique id of process 0 (ncclCommInitRank, grouped).
using TandemNcclCreateRanks = int (*)(int abi_version, const char* id, int total_ranks, int first_rank,
                                      const int* devices, int count, tandem::backend::DeviceCollectives** out,
                                      char* error, size_t error_size);
}  // extern "C"
