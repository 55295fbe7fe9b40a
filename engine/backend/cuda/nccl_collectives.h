// The plugin's raw NCCL collectives behind the plugin ABI (backend::DeviceCollectives):
// ncclCommInitAll over this process's devices, one non-blocking stream per rank, every NCCL and
// CUDA call checked with its text, values and NCCL's own words. The engine's Communicator over
// them (ring, watchdog, abort) is engine/distribute/nccl_communicator.h.
#pragma once

#include <nccl.h>

#include <atomic>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend/cuda/cuda_device.h"
#include "engine/backend/plugin_abi.h"

namespace tandem::cuda {

// Throws tandem::Error (Unavailable for system and remote errors, InvalidArgument for usage,
// Internal otherwise) naming the call, the values and ncclGetErrorString.
[[noreturn]] void throw_nccl_error(ncclResult_t status, std::string_view call, const std::string& values);

template <typename... Args>
void check_nccl(ncclResult_t status, std::string_view call, fmt::format_string<Args...> values, Args&&... args) {
  if (status == ncclSuccess) [[likely]] return;
  throw_nccl_error(status, call, fmt::format(values, std::forward<Args>(args)...));
}

class NcclCollectives final : public backend::DeviceCollectives {
 public:
  explicit NcclCollectives(std::vector<int> devices);
  // This process's ranks first_rank.. of total_ranks, over devices, joined through process 0's id.
  NcclCollectives(std::vector<int> devices, const ncclUniqueId& id, int total_ranks, int first_rank);
  ~NcclCollectives() override;
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  int world_size() const override { return static_cast<int>(devices_.size()); }
  int total_ranks() const override { return total_ranks_; }
  int first_rank() const override { return first_rank_; }
  int device(int rank) const override;
  Stream& stream(int rank) override;
  void all_reduce(int rank, void* data, size_t count, DType dtype, bool average) override;
  void broadcast(int rank, void* data, size_t bytes, int root) override;
  void all_gather(int rank, const void* in, void* out, size_t bytes_per_rank) override;
  std::string async_error(int rank) override;
  void abort() noexcept override;

 private:
  void check_rank(int rank) const;

  std::vector<int> devices_;
  int total_ranks_ = 0;
  int first_rank_ = 0;
  std::vector<ncclComm_t> comms_;
  std::vector<std::unique_ptr<CudaStream>> streams_;
  // abort() comes from whichever replica thread's watchdog fires first, while the others may be
  // launching: launches hold this shared, abort exclusive, so no communicator is freed under a
  // launch (unless one is stuck inside NCCL, which abort must not wait out).
  mutable std::shared_timed_mutex lifetime_;
  std::atomic<bool> aborted_{false};
};

}  // namespace tandem::cuda

#define TANDEM_NCCL_CHECK(call, ...) ::tandem::cuda::check_nccl((call), #call, __VA_ARGS__)
