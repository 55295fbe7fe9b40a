// NCCL in one process: ncclCommInitAll creates every rank's communicator at once; each replica
// thread then issues its own rank's calls, grouped (ncclGroupStart/End) so a caller may batch
// several and NCCL launches them as one.
#include "engine/backend/cuda/nccl_collectives.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>

#include "engine/backend/cuda/cuda_cast.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/core/error.h"

namespace tandem::cuda {
namespace {

ErrorCode code_for(ncclResult_t status) {
  switch (status) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: return ErrorCode::kInvalidArgument;
    case ncclSystemError:
    case ncclRemoteError: return ErrorCode::kUnavailable;
    default: return ErrorCode::kInternal;
  }
}

// Runs one rank's call inside a group, so NCCL does not wait for the other ranks' threads
// before returning (the calls of one process's ranks come from different threads).
template <typename F>
void grouped(F call) {
  TANDEM_NCCL_CHECK(ncclGroupStart(), "");
  try {
    call();
  } catch (...) {
    (void)ncclGroupEnd();
    throw;
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd(), "");
}

}  // namespace

void throw_nccl_error(ncclResult_t status, std::string_view call, const std::string& values) {
  throw Error(code_for(status), fmt::format("{} failed: NCCL error {}: {}{}", call, static_cast<int>(status),
                                            ncclGetErrorString(status), values.empty() ? "" : "; " + values));
}

NcclCollectives::NcclCollectives(std::vector<int> devices)
    : devices_(std::move(devices)), total_ranks_(static_cast<int>(devices_.size())) {
  TANDEM_CHECK(!devices_.empty(), ErrorCode::kInvalidArgument, "NCCL collectives need at least one device");
  comms_.resize(devices_.size(), nullptr);
  TANDEM_NCCL_CHECK(ncclCommInitAll(comms_.data(), world_size(), devices_.data()), "{} device(s): {}",
                    devices_.size(), fmt::join(devices_, ", "));
  for (int d : devices_) streams_.push_back(std::make_unique<CudaStream>(d));
}

NcclCollectives::NcclCollectives(std::vector<int> devices, const ncclUniqueId& id, int total_ranks, int first_rank)
    : devices_(std::move(devices)), total_ranks_(total_ranks), first_rank_(first_rank) {
  TANDEM_CHECK(!devices_.empty() && first_rank >= 0 && first_rank + world_size() <= total_ranks,
               ErrorCode::kInvalidArgument, "NCCL ranks {} to {} of {} over {} device(s)", first_rank,
               first_rank + world_size() - 1, total_ranks, devices_.size());
  comms_.resize(devices_.size(), nullptr);
  // One process initialising several ranks must group the calls: each waits for the others.
  TANDEM_NCCL_CHECK(ncclGroupStart(), "");
  try {
    for (size_t i = 0; i < devices_.size(); ++i) {
      DeviceGuard guard(devices_[i]);
      const int rank = first_rank + static_cast<int>(i);
      TANDEM_NCCL_CHECK(ncclCommInitRank(&comms_[i], total_ranks, id, rank), "rank {} of {} on cuda:{}", rank,
                        total_ranks, devices_[i]);
    }
  } catch (...) {
    (void)ncclGroupEnd();
    throw;
  }
  TANDEM_NCCL_CHECK(ncclGroupEnd(), "ranks {} to {} of {} on cuda:{}", first_rank, first_rank + world_size() - 1,
                    total_ranks, fmt::join(devices_, ", cuda:"));
  for (int d : devices_) streams_.push_back(std::make_unique<CudaStream>(d));
}

// Never throws: a destructor that throws ends the process and loses the first error of a
// multi-GPU failure, which is what is being unwound when this runs.
NcclCollectives::~NcclCollectives() {
  for (auto& s : streams_) {
    DeviceGuard guard(s->device().index, DeviceGuard::NoThrow{});
    if (guard.ok() && !aborted_) TANDEM_CUDA_CHECK_NOTHROW(cudaStreamSynchronize(s->get()));
  }
  for (ncclComm_t comm : comms_) {
    if (comm == nullptr || aborted_) continue;
    if (ncclResult_t status = ncclCommDestroy(comm); status != ncclSuccess) {
      spdlog::warn("ncclCommDestroy failed: {}", ncclGetErrorString(status));
    }
  }
}

void NcclCollectives::check_rank(int rank) const {
  TANDEM_CHECK(rank >= 0 && rank < world_size(), ErrorCode::kOutOfRange, "NCCL rank {} of {}", rank, world_size());
  TANDEM_CHECK(!aborted_, ErrorCode::kAborted, "NCCL collectives were aborted");
}

int NcclCollectives::device(int rank) const {
  check_rank(rank);
  return devices_[static_cast<size_t>(rank)];
}

Stream& NcclCollectives::stream(int rank) {
  check_rank(rank);
  return *streams_[static_cast<size_t>(rank)];
}

void NcclCollectives::all_reduce(int rank, void* data, size_t count, DType dtype, bool average) {
  std::shared_lock lock(lifetime_);
  check_rank(rank);
  TANDEM_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, ErrorCode::kInvalidArgument,
               "NCCL all_reduce on rank {}: element type {} (f32 or bf16 only)", rank, dtype_name(dtype));
  auto r = static_cast<size_t>(rank);
  DeviceGuard guard(devices_[r]);
  const bool bf16 = dtype == DType::kBF16;
  // NCCL's bf16 average multiplies each input by bf16(1 / n) first (0.33398 for 1/3): a bf16 average
  // is its sum, then one division rounded once, as the CPU communicators take it.
  const ncclRedOp_t op = average && !bf16 ? ncclAvg : ncclSum;
  grouped([&] {
    TANDEM_NCCL_CHECK(ncclAllReduce(data, data, count, bf16 ? ncclBfloat16 : ncclFloat32, op, comms_[r],
                                    streams_[r]->get()),
                      "rank {} (cuda:{}), {} x {} at {}, {}", rank, devices_[r], count, dtype_name(dtype), data,
                      average ? "avg" : "sum");
  });
  if (average && bf16) {
    backend::cuda::divide_bf16(data, static_cast<int64_t>(count), static_cast<float>(total_ranks_), streams_[r]->get());
  }
}

void NcclCollectives::broadcast(int rank, void* data, size_t bytes, int root) {
  std::shared_lock lock(lifetime_);
  check_rank(rank);
  auto r = static_cast<size_t>(rank);
  DeviceGuard guard(devices_[r]);
  grouped([&] {
    TANDEM_NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comms_[r], streams_[r]->get()),
                      "rank {} (cuda:{}), {} bytes, root {}", rank, devices_[r], bytes, root);
  });
}

void NcclCollectives::all_gather(int rank, const void* in, void* out, size_t bytes_per_rank) {
  std::shared_lock lock(lifetime_);
  check_rank(rank);
  auto r = static_cast<size_t>(rank);
  DeviceGuard guard(devices_[r]);
  grouped([&] {
    TANDEM_NCCL_CHECK(ncclAllGather(in, out, bytes_per_rank, ncclUint8, comms_[r], streams_[r]->get()),
                      "rank {} (cuda:{}), {} bytes per rank", rank, devices_[r], bytes_per_rank);
  });
}

std::string NcclCollectives::async_error(int rank) {
  std::shared_lock lock(lifetime_);
  check_rank(rank);
  ncclResult_t async = ncclSuccess;
  TANDEM_NCCL_CHECK(ncclCommGetAsyncError(comms_[static_cast<size_t>(rank)], &async), "rank {}", rank);
  if (async == ncclSuccess || async == ncclInProgress) return {};
  return fmt::format("NCCL error {} on rank {} (cuda:{}): {}", static_cast<int>(async), rank,
                     devices_[static_cast<size_t>(rank)], ncclGetErrorString(async));
}

void NcclCollectives::abort() noexcept {
  if (aborted_.exchange(true)) return;
  std::unique_lock lock(lifetime_, std::defer_lock);
  try {
    // Launches hold the lock for microseconds; one stuck inside NCCL must not stop the abort.
    if (!lock.try_lock_for(std::chrono::seconds(2))) {
      spdlog::warn("NCCL abort: a launch still holds the communicators after 2 s; aborting anyway");
    }
  } catch (const std::exception& e) {
    spdlog::warn("NCCL abort: could not lock the communicators ({}); aborting anyway", e.what());
  }
  for (ncclComm_t comm : comms_) {
    if (comm != nullptr) (void)ncclCommAbort(comm);
  }
}

}  // namespace tandem::cuda

namespace {

// No exception crosses dlsym: every entry point reports in error and a return code.
template <typename F>
int guarded_entry(int abi_version, char* error, size_t error_size, F&& body) {
  auto write_error = [&](const std::string& text) {
    if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", text.c_str());
  };
  if (abi_version != kTandemNcclAbi) {
    write_error(fmt::format("NCCL ABI mismatch: the engine speaks version {}, this plugin {}; rebuild both",
                            abi_version, kTandemNcclAbi));
    return 1;
  }
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    write_error(e.what());
  } catch (...) {
    write_error("unknown exception in the NCCL entry point");
  }
  return 1;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int tandem_cuda_nccl_create(
    int abi_version, const int* devices, int count, tandem::backend::DeviceCollectives** out, char* error,
    size_t error_size) {
  return guarded_entry(abi_version, error, error_size, [&] {
    TANDEM_CHECK(out != nullptr && devices != nullptr && count > 0, tandem::ErrorCode::kInvalidArgument,
                 "tandem_cuda_nccl_create: no output, or no devices");
    *out = new tandem::cuda::NcclCollectives(std::vector<int>(devices, devices + count));
  });
}


static_assert(sizeof(ncclUniqueId) == kTandemNcclUniqueIdBytes, "NCCL_UNIQUE_ID_BYTES changed");

extern "C" __attribute__((visibility("default"))) int tandem_cuda_nccl_unique_id(int abi_version, char* id,
                                                                                 char* error, size_t error_size) {
  return guarded_entry(abi_version, error, error_size, [&] {
    TANDEM_CHECK(id != nullptr, tandem::ErrorCode::kInvalidArgument, "tandem_cuda_nccl_unique_id: no output");
    ncclUniqueId unique;
    TANDEM_NCCL_CHECK(ncclGetUniqueId(&unique), "");
    std::memcpy(id, unique.internal, sizeof unique.internal);
  });
}

extern "C" __attribute__((visibility("default"))) int tandem_cuda_nccl_create_ranks(
    int abi_version, const char* id, int total_ranks, int first_rank, const int* devices, int count,
    tandem::backend::DeviceCollectives** out, char* error, size_t error_size) {
  return guarded_entry(abi_version, error, error_size, [&] {
    TANDEM_CHECK(id != nullptr && out != nullptr && devices != nullptr && count > 0, tandem::ErrorCode::kInvalidArgument,
                 "tandem_cuda_nccl_create_ranks: no id, no output, or no devices");
    ncclUniqueId unique;
    std::memcpy(unique.internal, id, sizeof unique.internal);
    *out = new tandem::cuda::NcclCollectives(std::vector<int>(devices, devices + count), unique, total_ranks,
                                             first_rank);
  });
}
